// The pages of keys and edges (which edge holds which key, rotate when they are ready) and of
// the audit trail (searchable, each event's before and after side by side).
import { api } from "./api.js";
import { act } from "./pages.js";
import { el, fail, list, pagedList, query, table, when } from "./ui.js";

const json = (v) => el("pre", { class: "json", text: v === null || v === undefined ? "—" : JSON.stringify(v, null, 2) });

function edgesTable(report) {
  const edges = report.edges ?? [];
  if (!edges.length) return el("p", { text: "No edge has reported yet." });
  const newest = report.next ?? report.signing;
  return table(
    "Edges",
    [
      ["Edge client", (e) => e.client],
      ["Node", (e) => e.node],
      ["Worker VM", (e) => e.vm],
      ["Holds keys", (e) => list((e.kids ?? []).map(String))],
      ["Holds the newest key", (e) => ((e.kids ?? []).includes(newest) ? "yes" : "no")],
      ["Behind (revocations)", (e) => String(e.behind ?? "—")],
      ["Last seen", (e) => when(e.last_seen)],
    ],
    edges,
  );
}

/** The key ring, the edges' report, and rotate (refused by the API until they are ready). */
export function keysPage(can) {
  const box = el("div", { class: "keys" });
  const load = async () => {
    try {
      const [keys, report] = await Promise.all([api("GET", "/apiv2/admin/keys"), api("GET", "/apiv2/admin/edges")]);
      const ready = !!report.ready_to_rotate;
      // With no next key, rotating publishes one (it signs once every edge holds it).
      const publish = report.next === null && !report.held;
      const rotate = el("button", { type: "button", text: "Rotate the signing key", disabled: !ready && !publish });
      rotate.addEventListener("click", () => act(rotate, () => api("POST", "/apiv2/admin/keys/rotate", { body: {}, etag: keys.etag ?? report.etag }), load));
      box.replaceChildren(
        table(
          "Keys",
          [
            ["Key id", (k) => el("code", { text: String(k.kid) })],
            ["State", (k) => k.state],
            ["Created", (k) => when(k.created)],
          ],
          keys.items ?? [],
        ),
        el("h2", { text: "Edges" }),
        el("p", {
          class: ready || publish ? "ready" : "waiting",
          text: publish
            ? "No next key is published: rotating publishes one, which signs once every edge holds it."
            : ready
              ? "Every recent edge holds the next key: rotating makes it the signing key."
              : "Not every recent edge holds the next key yet: rotating is refused until they do.",
        }),
        edgesTable(report),
        can("POST", "/apiv2/admin/keys/rotate") ? rotate : null,
        el("button", { type: "button", text: "Reload", onclick: load }),
      );
    } catch (e) {
      fail(e);
    }
  };
  load();
  return [el("h1", { text: "Keys and edges" }), box];
}

/** The audit trail, newest first, searchable, before and after side by side. */
export function auditPage() {
  const since = el("input", { type: "date", id: "audit-since", name: "since" });
  const sinceSeconds = () => (since.value ? String(Math.floor(Date.parse(`${since.value}T00:00:00Z`) / 1000)) : "");
  const event = (e) =>
    el(
      "article",
      { class: "event" },
      el(
        "h2",
        {},
        el("span", { class: "action", text: e.action }),
        " ",
        el("code", { text: e.target }),
      ),
      el(
        "p",
        { class: "meta" },
        `${when(e.at)} by ${e.actor}`,
        e.client ? ` through ${e.client}` : "",
        e.address ? ` from ${e.address}` : "",
      ),
      el(
        "div",
        { class: "diff" },
        el("section", { "aria-label": "Before" }, el("h3", { text: "Before" }), json(e.before)),
        el("section", { "aria-label": "After" }, el("h3", { text: "After" }), json(e.after)),
      ),
    );
  return [
    el("h1", { text: "Audit trail" }),
    pagedList({
      label: "audit events",
      extra: [el("label", { for: since.id, text: "Since" }), since],
      load: (q, after) => api("GET", `/apiv2/admin/audit${query({ q, since: sinceSeconds(), after })}`),
      render: (items) => el("div", { class: "events" }, items.map(event)),
    }),
  ];
}
