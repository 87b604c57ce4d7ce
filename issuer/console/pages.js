// The pages of clients, users and sessions: each a paged, searchable list whose rows carry the
// actions the signed-in user may take (`can`), each action sent with the row's etag as If-Match
// and answered by the API's own sentence.
import { api } from "./api.js";
import { announce, el, fail, list, pagedList, query, table, when } from "./ui.js";

const enc = encodeURIComponent;

/** Runs one write: the button is busy meanwhile, the API's message or refusal is shown, and the
 * list is read again either way (a 412 means it changed under us). */
export async function act(button, write, reload) {
  button.disabled = true;
  try {
    const r = await write();
    announce(r.message || "Done.");
  } catch (e) {
    fail(e);
  } finally {
    button.disabled = false;
  }
  reload();
}

/** Checkboxes for `grants` (those in `checked` ticked) and "no impersonation"; returns the
 * fieldset and a function reading the choice as the API's body. */
function grantChooser(id, grants, checked, impersonation) {
  const boxes = grants.map((g) => el("input", { type: "checkbox", id: `${id}-${g}`, value: g, checked: checked.includes(g) }));
  const noImp = el("input", { type: "checkbox", id: `${id}-no-imp`, checked: impersonation === "none" });
  const fieldset = el(
    "fieldset",
    { class: "grants" },
    el("legend", { text: "Grants to allow" }),
    grants.map((g, i) => el("span", { class: "choice" }, boxes[i], el("label", { for: boxes[i].id, text: g }))),
    impersonation && impersonation !== "none"
      ? el("span", { class: "choice" }, noImp, el("label", { for: noImp.id, text: `No impersonation (asked: ${impersonation})` }))
      : null,
  );
  const read = () => {
    const body = { grants: boxes.filter((b) => b.checked).map((b) => b.value) };
    if (impersonation && impersonation !== "none") body.no_impersonation = noImp.checked;
    return body;
  };
  return [fieldset, read];
}

const clientColumns = [
  ["Client", (c) => el("code", { text: c.id })],
  ["Vendor", (c) => c.vendor ?? "—"],
  ["Name", (c) => c.name ?? "—"],
];

function pendingRow(c, can, reload) {
  if (!can("POST", "/apiv2/admin/clients/*/activate")) return null;
  const asked = c.requested_grants ?? c.grants ?? [];
  const [chooser, read] = grantChooser(`act-${c.id}`, asked, asked, c.requested_impersonation);
  const button = el("button", { type: "button", text: `Activate ${c.id}` });
  button.addEventListener("click", () =>
    act(button, () => api("POST", `/apiv2/admin/clients/${enc(c.id)}/activate`, { body: read(), etag: c.etag }), reload),
  );
  return el("div", { class: "row-form" }, asked.length ? chooser : null, button);
}

/** Pending clients: what each asks for, its statement's expiry, activate (narrowed or not). */
export function pendingPage(can) {
  return [
    el("h1", { text: "Pending clients" }),
    el("p", { text: "Clients registered with a vendor statement, waiting for an administrator. Untick what the client should not get, then activate." }),
    pagedList({
      label: "pending clients",
      load: (q, after) => api("GET", `/apiv2/admin/clients${query({ state: "pending", q, after })}`),
      render: (items, reload) =>
        table(
          "Pending clients",
          [
            ...clientColumns,
            ["Software", (c) => c.software_id ?? "—"],
            ["Asks for", (c) => list(c.requested_grants ?? c.grants)],
            ["Impersonation asked", (c) => c.requested_impersonation ?? c.impersonation ?? "—"],
            ["Statement expires", (c) => when(c.statement_expires)],
          ],
          items,
          (c) => pendingRow(c, can, reload),
        ),
    }),
  ];
}

function clientActions(c, can, reload) {
  const out = [];
  if (c.state === "active" && can("POST", "/apiv2/admin/clients/*/deactivate")) {
    const b = el("button", { type: "button", class: "danger", text: `Deactivate ${c.id}` });
    b.addEventListener("click", () =>
      act(b, () => api("POST", `/apiv2/admin/clients/${enc(c.id)}/deactivate`, { body: {}, etag: c.etag }), reload),
    );
    out.push(b);
  }
  if (c.state === "active" && c.vendor && can("POST", "/apiv2/admin/clients/*/narrow")) {
    const allowed = c.requested_grants ?? c.grants;
    const [chooser, read] = grantChooser(`nar-${c.id}`, allowed, c.grants, c.impersonation === "none" ? "none" : c.impersonation);
    const b = el("button", { type: "button", text: `Narrow ${c.id}` });
    b.addEventListener("click", () =>
      act(b, () => api("POST", `/apiv2/admin/clients/${enc(c.id)}/narrow`, { body: read(), etag: c.etag }), reload),
    );
    out.push(el("details", {}, el("summary", { text: "Narrow…" }), el("div", { class: "row-form" }, chooser, b)));
  }
  if (c.state === "inactive" && can("POST", "/apiv2/admin/clients/*/activate")) {
    const b = el("button", { type: "button", text: `Activate ${c.id}` });
    b.addEventListener("click", () =>
      act(b, () => api("POST", `/apiv2/admin/clients/${enc(c.id)}/activate`, { body: {}, etag: c.etag }), reload),
    );
    out.push(b);
  }
  return out;
}

/** Every client, by state, with deactivate (and narrow for a vendor's). */
export function clientsPage(can) {
  const state = el(
    "select",
    { id: "client-state", name: "state" },
    ["all", "active", "inactive", "pending"].map((s) => el("option", { value: s, text: s })),
  );
  return [
    el("h1", { text: "Clients" }),
    pagedList({
      label: "clients",
      extra: [el("label", { for: state.id, text: "State" }), state],
      load: (q, after) => api("GET", `/apiv2/admin/clients${query({ state: state.value, q, after })}`),
      render: (items, reload) =>
        table(
          "Clients",
          [
            ...clientColumns,
            ["State", (c) => el("span", { class: `state ${c.state}`, text: c.state })],
            ["Grants", (c) => list(c.grants)],
            ["Impersonation", (c) => c.impersonation ?? "—"],
            ["DPoP", (c) => c.dpop ?? "—"],
          ],
          items,
          (c) => clientActions(c, can, reload),
        ),
    }),
  ];
}

/** Users, local and directory, with disable and enable. */
export function usersPage(can) {
  const toggle = (u, reload) => {
    const verb = u.enabled ? "disable" : "enable";
    if (!can("POST", `/apiv2/admin/users/*/${verb}`)) return null;
    const b = el("button", { type: "button", class: u.enabled ? "danger" : "", text: `${u.enabled ? "Disable" : "Enable"} ${u.name}` });
    b.addEventListener("click", () =>
      act(b, () => api("POST", `/apiv2/admin/users/${enc(u.name)}/${verb}`, { body: {}, etag: u.etag }), reload),
    );
    return b;
  };
  return [
    el("h1", { text: "Users" }),
    pagedList({
      label: "users",
      load: (q, after) => api("GET", `/apiv2/admin/users${query({ q, after })}`),
      render: (items, reload) =>
        table(
          "Users",
          [
            ["User", (u) => el("code", { text: u.name })],
            ["Source", (u) => u.source],
            ["Enabled", (u) => (u.enabled ? "yes" : "no — disabled")],
            ["Roles", (u) => list(u.roles)],
          ],
          items,
          (u) => toggle(u, reload),
        ),
    }),
  ];
}

/** Live sessions (refresh families), with revoke. */
export function sessionsPage(can) {
  const revoke = (s, reload) => {
    if (!can("POST", "/apiv2/admin/sessions/*/revoke")) return null;
    const b = el("button", { type: "button", class: "danger", text: `Revoke session of ${s.user}` });
    b.addEventListener("click", () =>
      act(b, () => api("POST", `/apiv2/admin/sessions/${enc(s.id)}/revoke`, { body: {}, etag: s.etag }), reload),
    );
    return b;
  };
  return [
    el("h1", { text: "Sessions" }),
    pagedList({
      label: "sessions",
      searchLabel: "Sessions of the users whose name starts with",
      load: (q, after) => api("GET", `/apiv2/admin/sessions${query({ q, after })}`),
      render: (items, reload) =>
        table(
          "Sessions",
          [
            ["Session", (s) => el("code", { text: s.id })],
            ["User", (s) => s.user],
            ["Client", (s) => s.client],
            ["Started", (s) => when(s.created)],
            ["Last used", (s) => when(s.last_used)],
          ],
          items,
          (s) => revoke(s, reload),
        ),
    }),
  ];
}
