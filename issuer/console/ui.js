// Small DOM helpers of the console: elements built with textContent only (never innerHTML, so
// nothing an item holds is ever read as markup), the two live regions (what was done, what
// failed), and the paged, searchable list every page is made of.

/** An element: `attrs` are properties or attributes (`on*` functions become listeners). */
export function el(tag, attrs = {}, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (v === undefined || v === null || v === false) continue;
    if (k.startsWith("on") && typeof v === "function") e.addEventListener(k.slice(2), v);
    else if (k === "class") e.className = v;
    else if (k === "text") e.textContent = v;
    else if (k in e && typeof v !== "string") e[k] = v;
    else e.setAttribute(k, v === true ? "" : String(v));
  }
  for (const c of children.flat()) {
    if (c === null || c === undefined || c === false) continue;
    e.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return e;
}

const $ = (id) => document.getElementById(id);

/** Says what was done (the polite live region), and clears the last failure. */
export function announce(message) {
  $("alert").textContent = "";
  $("alert").hidden = true;
  $("status").textContent = message;
}

/** Says what failed and why (the assertive live region). */
export function fail(error) {
  $("status").textContent = "";
  $("alert").hidden = false;
  $("alert").textContent = error && error.message ? error.message : String(error);
}

/** Clears both regions. */
export function quiet() {
  $("status").textContent = "";
  $("alert").textContent = "";
  $("alert").hidden = true;
}

/** A unix time in seconds as a readable UTC date, or "—". */
export function when(seconds) {
  if (seconds === null || seconds === undefined) return "—";
  const d = new Date(Number(seconds) * 1000);
  return Number.isNaN(d.getTime()) ? String(seconds) : d.toISOString().replace("T", " ").replace(/\.\d+Z$/, " UTC");
}

/** A list of strings, or "—". */
export const list = (xs) => (Array.isArray(xs) && xs.length ? xs.join(", ") : "—");

/** A table of `items`: `columns` are [heading, item => cell], `actions(item)` the row's buttons. */
export function table(caption, columns, items, actions) {
  const head = el("tr", {}, columns.map(([h]) => el("th", { scope: "col", text: h })), actions ? el("th", { scope: "col", text: "Actions" }) : null);
  const rows = items.map((item) =>
    el("tr", {}, columns.map(([, f]) => el("td", {}, f(item))), actions ? el("td", { class: "actions" }, actions(item)) : null),
  );
  return el("table", {}, el("caption", { text: caption }), el("thead", {}, head), el("tbody", {}, rows));
}

/**
 * A paged, searchable list: a search form, the table, and "More" while the API has a next
 * page. `load(q, after)` returns the API's `{items, next}`; `render(items)` the table;
 * `searchLabel` says what the search box matches.
 */
export function pagedList({ label, load, render, extra = [], searchLabel = `Search ${label}` }) {
  const box = el("div", { class: "list" });
  const q = el("input", { type: "search", id: `q-${label}`, name: "q", autocomplete: "off" });
  const results = el("div", { class: "results" });
  let items = [];
  let next = null;
  const more = el("button", { type: "button", text: "More", hidden: true });
  async function fetchPage(reset) {
    try {
      const page = await load(q.value.trim(), reset ? null : next);
      items = reset ? page.items : items.concat(page.items);
      next = page.next;
      const none = next ? `No ${label} found yet: "More" reads on.` : `No ${label} found.`;
      results.replaceChildren(items.length ? render(items, reload) : el("p", { text: none }));
      more.hidden = !next;
    } catch (e) {
      fail(e);
    }
  }
  const reload = () => fetchPage(true);
  more.addEventListener("click", () => fetchPage(false));
  const form = el(
    "form",
    { class: "search", role: "search", onsubmit: (ev) => { ev.preventDefault(); reload(); } },
    el("label", { for: q.id, text: searchLabel }),
    q,
    extra,
    el("button", { type: "submit", text: "Search" }),
  );
  box.append(form, results, more);
  reload();
  return box;
}

/** A query string of the non-empty values of `params`. */
export function query(params) {
  const s = new URLSearchParams();
  for (const [k, v] of Object.entries(params)) if (v !== null && v !== undefined && v !== "") s.set(k, v);
  const text = s.toString();
  return text ? `?${text}` : "";
}
