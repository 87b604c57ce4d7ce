// The console's shell: sign-in, the navigation (only the pages the signed-in user's roles
// allow, as `GET /apiv2/admin/me` lists its routes), hash routing between the pages, and the
// messages for an ended session and a lost network.
import { api, endSession, onSessionEnd, signIn, signedIn, start } from "./api.js";
import { announce, el, fail, quiet } from "./ui.js";
import { clientsPage, pendingPage, sessionsPage, usersPage } from "./pages.js";
import { auditPage, keysPage } from "./pages_more.js";

/** Each page: its hash, its title, the route its list needs, and how it is drawn. */
const PAGES = [
  { hash: "pending", title: "Pending clients", needs: "GET /apiv2/admin/clients", draw: pendingPage },
  { hash: "clients", title: "Clients", needs: "GET /apiv2/admin/clients", draw: clientsPage },
  { hash: "users", title: "Users", needs: "GET /apiv2/admin/users", draw: usersPage },
  { hash: "sessions", title: "Sessions", needs: "GET /apiv2/admin/sessions", draw: sessionsPage },
  { hash: "keys", title: "Keys and edges", needs: "GET /apiv2/admin/keys", draw: keysPage },
  { hash: "audit", title: "Audit trail", needs: "GET /apiv2/admin/audit", draw: auditPage },
];

const $ = (id) => document.getElementById(id);
let me = null;
/** Set while a navigation of the console's own should keep the message just shown. */
let keepMessage = false;

/** A route as "METHOD /path" with every `{name}`, `:name` or `<name>` segment as `*`. */
const shape = (route) => route.replace(/\/(\{[^/}]*\}|:[^/]+|<[^/>]*>)(?=\/|$)/g, "/*");

/** Whether the signed-in user may call `method pattern` (segments of ids written `*`). */
function can(method, pattern) {
  return !!me && me.routes.some((r) => shape(r) === `${method} ${pattern}`);
}

function allowedPages() {
  return PAGES.filter((p) => can(...p.needs.split(" ")));
}

function drawNav() {
  const nav = $("nav");
  const pages = allowedPages();
  const current = location.hash.slice(2);
  nav.querySelector("ul").replaceChildren(
    ...pages.map((p) =>
      el("li", {}, el("a", { href: `#/${p.hash}`, text: p.title, "aria-current": p.hash === current ? "page" : null })),
    ),
  );
  nav.hidden = false;
  $("who").textContent = `${me.user} (${me.roles.join(", ") || "no admin role"})`;
  $("sign-out").hidden = false;
}

/** `GET /apiv2/admin/me`; a user without an admin role (403) may sign in and sees nothing. */
async function whoAmI(name) {
  try {
    return await api("GET", "/apiv2/admin/me");
  } catch (e) {
    if (e.status !== 403) throw e;
    return { user: name, roles: [], routes: [] };
  }
}

function signInPage(message) {
  me = null;
  $("nav").hidden = true;
  $("sign-out").hidden = true;
  $("who").textContent = "";
  const user = el("input", { id: "username", name: "username", autocomplete: "username", required: true });
  const pass = el("input", { id: "password", name: "password", type: "password", autocomplete: "current-password", required: true });
  const submit = el("button", { type: "submit", text: "Sign in" });
  const form = el(
    "form",
    { class: "signin", "aria-labelledby": "signin-title" },
    el("h1", { id: "signin-title", text: "Sign in" }),
    el("p", { text: "Your issuer account (local or directory). The session lasts minutes and is bound to a key this page made, which cannot leave the browser." }),
    el("label", { for: user.id, text: "User name" }),
    user,
    el("label", { for: pass.id, text: "Password" }),
    pass,
    submit,
  );
  form.addEventListener("submit", async (ev) => {
    ev.preventDefault();
    submit.disabled = true;
    try {
      await signIn(user.value, pass.value);
      pass.value = "";
      me = await whoAmI(user.value);
      const first = allowedPages()[0];
      const hash = `#/${first ? first.hash : "none"}`;
      if (location.hash === hash) route();
      else {
        keepMessage = true;
        location.hash = hash;
      }
      announce(`Signed in as ${me.user}.`);
    } catch (e) {
      fail(e);
      pass.focus();
    } finally {
      submit.disabled = false;
    }
  });
  $("main").replaceChildren(form);
  if (message) fail(message);
  user.focus();
}

function route() {
  if (!signedIn() || !me) {
    signInPage();
    return;
  }
  drawNav();
  const hash = location.hash.slice(2);
  const page = allowedPages().find((p) => p.hash === hash);
  const main = $("main");
  if (!page) {
    main.replaceChildren(
      el("h1", { text: "Nothing to show" }),
      el("p", { text: allowedPages().length ? "Choose a page above." : "Your account holds no administrative role: there is nothing it may see here." }),
    );
    return;
  }
  document.title = `${page.title} — issuer console`;
  main.replaceChildren(...page.draw(can));
  main.focus();
}

onSessionEnd((reason) => signInPage(reason));
window.addEventListener("hashchange", () => {
  if (!keepMessage) quiet();
  keepMessage = false;
  route();
});
window.addEventListener("offline", () =>
  fail("You are offline: the console cannot reach the issuer. Nothing is sent until the network is back."),
);
window.addEventListener("online", () => announce("Back online."));
$("sign-out").addEventListener("click", () => {
  endSession();
  announce("Signed out. The session's key is forgotten when this page closes.");
});

try {
  await start();
  route();
} catch (e) {
  fail(`The console could not start: ${e && e.message ? e.message : e}`);
}
