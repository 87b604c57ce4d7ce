// Each role sees only its own pages and buttons, and what the page hides the API refuses too:
// the forbidden call made from inside the page, with the page's own token and key, is a 403.
import { expect, test } from "@playwright/test";
import { apiFromPage, open, signIn, users, vendorClient } from "./helpers.js";

const ALL = ["Pending clients", "Clients", "Users", "Sessions", "Keys and edges", "Audit trail"];
/** Each role's user, the pages it sees, and a write it may not make. */
const CASES = [
  { user: "clerk", pages: ["Pending clients", "Clients"], forbidden: ["POST", "/apiv2/admin/users/carol/disable"] },
  { user: "people", pages: ["Users"], forbidden: ["POST", "/apiv2/admin/clients/VENDOR/activate"] },
  { user: "porter", pages: ["Sessions"], forbidden: ["POST", "/apiv2/admin/keys/rotate"] },
  { user: "keeper", pages: ["Keys and edges"], forbidden: ["POST", "/apiv2/admin/users/carol/disable"] },
  { user: "auditor", pages: ["Audit trail"], forbidden: ["POST", "/apiv2/admin/clients/VENDOR/deactivate"] },
  { user: "reader", pages: ALL, forbidden: ["POST", "/apiv2/admin/users/carol/disable"] },
];

for (const c of CASES) {
  test(`${c.user} (${users()[c.user].roles.join(", ")}) sees only its pages and is refused the rest`, async ({ page }) => {
    await signIn(page, c.user);
    const nav = page.getByRole("navigation", { name: "Pages" }).getByRole("link");
    await expect(nav).toHaveText(c.pages);
    for (const title of c.pages) await open(page, title);
    if (c.user === "reader") {
      // Every page, and not one button that writes.
      for (const title of ALL) {
        await open(page, title);
        await expect(page.getByRole("button", { name: /^(Activate|Deactivate|Narrow|Disable|Enable|Revoke|Rotate)/ })).toHaveCount(0);
      }
    }
    const [method, path] = c.forbidden;
    const r = await apiFromPage(page, method, path.replace("VENDOR", vendorClient()), {});
    expect(r.status, JSON.stringify(r)).toBe(403);
    expect(r.kind).toBe("forbidden");
    // A page not in the navigation, asked for by its address: nothing of it is shown.
    const hidden = ALL.find((t) => !c.pages.includes(t));
    if (hidden) {
      const hash = { "Pending clients": "pending", Clients: "clients", Users: "users", Sessions: "sessions", "Keys and edges": "keys", "Audit trail": "audit" }[hidden];
      await page.goto(`./#/${hash}`);
      await expect(page.getByRole("heading", { level: 1 })).toHaveText("Nothing to show");
    }
  });
}

test("a user with no admin role signs in, sees nothing, and every API call is refused", async ({ page }) => {
  await signIn(page, "nobody");
  await expect(page.getByRole("heading", { level: 1 })).toHaveText("Nothing to show");
  const r = await apiFromPage(page, "GET", "/apiv2/admin/users");
  expect(r.status, JSON.stringify(r)).toBe(403);
});
