//! The admin API's routes, in one table ([`ROUTES`]): each route's method, path, the role it
//! needs, whether it changes anything, and what it does ([`Op`]). The router matches requests
//! against it, `GET /apiv2/admin/me` lists from it, the tests walk it, and `docs/admin-api.md`'s
//! matrix is rendered from it ([`matrix`]).

/// An administrative role, as a user's roles name it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// Clients: read, activate, narrow, deactivate, import statements.
    Clients,
    /// Users: read, disable, enable.
    Users,
    /// Sessions (refresh token families): read, revoke.
    Sessions,
    /// Keys and edges: read, rotate when the edges are ready.
    Keys,
    /// The audit trail: read.
    Audit,
    /// Every read, no write.
    Read,
}

impl Role {
    /// Every role, in the matrix's order.
    pub const ALL: [Role; 6] = [
        Self::Clients,
        Self::Users,
        Self::Sessions,
        Self::Keys,
        Self::Audit,
        Self::Read,
    ];

    /// The role's name in a user's roles.
    pub fn name(self) -> &'static str {
        match self {
            Self::Clients => "admin:clients",
            Self::Users => "admin:users",
            Self::Sessions => "admin:sessions",
            Self::Keys => "admin:keys",
            Self::Audit => "admin:audit",
            Self::Read => "admin:read",
        }
    }

    /// The role named `name`, if it is an admin role.
    pub fn named(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|r| r.name() == name)
    }
}

/// What a route does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    Me,
    ClientList,
    ClientGet,
    ClientActivate,
    ClientNarrow,
    ClientDeactivate,
    ClientImport,
    UserList,
    UserDisable,
    UserEnable,
    SessionList,
    SessionRevoke,
    KeyList,
    Edges,
    KeyRotate,
    AuditList,
}

/// One route of the admin API.
#[derive(Debug, Clone, Copy)]
pub struct Route {
    /// `GET` or `POST`.
    pub method: &'static str,
    /// The path; `{id}` (or `{name}`) stands for one segment.
    pub path: &'static str,
    /// The role it needs besides `admin:read` for a read; `None`: any admin role.
    pub role: Option<Role>,
    /// It changes something: it needs `If-Match` on an item, and is audited.
    pub mutating: bool,
    /// What it does.
    pub op: Op,
}

const fn get(path: &'static str, role: Option<Role>, op: Op) -> Route {
    Route {
        method: "GET",
        path,
        role,
        mutating: false,
        op,
    }
}

const fn post(path: &'static str, role: Role, op: Op) -> Route {
    Route {
        method: "POST",
        path,
        role: Some(role),
        mutating: true,
        op,
    }
}

/// Every route of the admin API: the one list the router, `me`, the tests and the docs use.
pub const ROUTES: &[Route] = &[
    get("/apiv2/admin/me", None, Op::Me),
    get("/apiv2/admin/clients", Some(Role::Clients), Op::ClientList),
    get(
        "/apiv2/admin/clients/{id}",
        Some(Role::Clients),
        Op::ClientGet,
    ),
    post(
        "/apiv2/admin/clients/import",
        Role::Clients,
        Op::ClientImport,
    ),
    post(
        "/apiv2/admin/clients/{id}/activate",
        Role::Clients,
        Op::ClientActivate,
    ),
    post(
        "/apiv2/admin/clients/{id}/narrow",
        Role::Clients,
        Op::ClientNarrow,
    ),
    post(
        "/apiv2/admin/clients/{id}/deactivate",
        Role::Clients,
        Op::ClientDeactivate,
    ),
    get("/apiv2/admin/users", Some(Role::Users), Op::UserList),
    post(
        "/apiv2/admin/users/{name}/disable",
        Role::Users,
        Op::UserDisable,
    ),
    post(
        "/apiv2/admin/users/{name}/enable",
        Role::Users,
        Op::UserEnable,
    ),
    get(
        "/apiv2/admin/sessions",
        Some(Role::Sessions),
        Op::SessionList,
    ),
    post(
        "/apiv2/admin/sessions/{id}/revoke",
        Role::Sessions,
        Op::SessionRevoke,
    ),
    get("/apiv2/admin/keys", Some(Role::Keys), Op::KeyList),
    get("/apiv2/admin/edges", Some(Role::Keys), Op::Edges),
    post("/apiv2/admin/keys/rotate", Role::Keys, Op::KeyRotate),
    get("/apiv2/admin/audit", Some(Role::Audit), Op::AuditList),
];

impl Route {
    /// Whether a user holding `roles` may use this route.
    pub fn allows(&self, roles: &[Role]) -> bool {
        match self.role {
            None => !roles.is_empty(),
            Some(needed) => {
                roles.contains(&needed) || (!self.mutating && roles.contains(&Role::Read))
            }
        }
    }

    /// `GET /apiv2/admin/clients`, as `me` lists it.
    pub fn label(&self) -> String {
        format!("{} {}", self.method, self.path)
    }

    /// The segment `{id}` (`{name}`) of `path` if `path` is this route's (exact otherwise).
    pub fn matches<'p>(&self, path: &'p str) -> Option<Option<&'p str>> {
        let mut id = None;
        let mut ours = self.path.split('/');
        let mut theirs = path.split('/');
        loop {
            match (ours.next(), theirs.next()) {
                (None, None) => return Some(id),
                (Some(p), Some(seg)) if p.starts_with('{') && !seg.is_empty() => id = Some(seg),
                (Some(a), Some(b)) if a == b => {}
                _ => return None,
            }
        }
    }
}

/// The admin roles among a user's `roles`.
pub fn roles_of(roles: &[String]) -> Vec<Role> {
    roles.iter().filter_map(|r| Role::named(r)).collect()
}

/// The route × role matrix as a Markdown table: for each route, each role (and a user with no
/// admin role), whether it is allowed (`yes`) or refused with 403 (`403`).
pub fn matrix() -> String {
    let mut out = String::from("| route | ");
    let names: Vec<&str> = Role::ALL.iter().map(|r| r.name()).collect();
    out += &names.join(" | ");
    out += " | no admin role |\n|---|";
    out += &"---|".repeat(Role::ALL.len() + 1);
    out.push('\n');
    for r in ROUTES {
        out += &format!("| `{}` |", r.label());
        for role in Role::ALL {
            out += if r.allows(&[role]) {
                " yes |"
            } else {
                " 403 |"
            };
        }
        out += if r.allows(&[]) {
            " yes |\n"
        } else {
            " 403 |\n"
        };
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_match_with_one_id_segment() {
        let activate = ROUTES.iter().find(|r| r.op == Op::ClientActivate).unwrap();
        assert_eq!(
            activate.matches("/apiv2/admin/clients/app/activate"),
            Some(Some("app"))
        );
        assert_eq!(activate.matches("/apiv2/admin/clients//activate"), None);
        assert_eq!(activate.matches("/apiv2/admin/clients/a/b/activate"), None);
        let me = &ROUTES[0];
        assert_eq!(me.matches("/apiv2/admin/me"), Some(None));
        assert_eq!(me.matches("/apiv2/admin/me/"), None);
    }

    #[test]
    fn read_role_reads_and_never_writes() {
        for r in ROUTES {
            assert_eq!(r.allows(&[Role::Read]), !r.mutating, "{}", r.label());
            assert_eq!(r.mutating, r.method == "POST");
        }
        assert!(!ROUTES[0].allows(&[]));
    }

    #[test]
    fn the_docs_hold_the_matrix() {
        let docs = include_str!("../../../../docs/admin-api.md");
        assert!(
            docs.contains(&matrix()),
            "docs/admin-api.md must hold the matrix as table::matrix renders it:\n{}",
            matrix()
        );
    }
}
