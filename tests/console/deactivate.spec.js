// The main scenario, second half: the administrator deactivates the client (the Rust test then
// sees its token refused at every Envoy worker), and walks the other pages: a user disabled and
// enabled, a session revoked, the keys and edges, the audit trail of what was done, before and
// after side by side. Each page's screenshot is taken here.
import { expect, test } from "@playwright/test";
import { open, shot, signIn, vendorClient } from "./helpers.js";

test("an administrator deactivates the client and walks every page", async ({ page }) => {
  const id = vendorClient();
  await signIn(page, "root");
  await open(page, "Clients");
  const row = page.getByRole("row").filter({ hasText: id });
  await row.getByRole("button", { name: `Deactivate ${id}` }).click();
  await expect(page.getByRole("status")).toContainText(id);
  await expect(page.getByRole("row").filter({ hasText: id })).toContainText("inactive");
  await shot(page, "clients");

  await open(page, "Users");
  const carol = () => page.getByRole("row").filter({ hasText: "carol" });
  await carol().getByRole("button", { name: "Disable carol" }).click();
  await expect(page.getByRole("status")).toContainText("carol");
  await expect(carol()).toContainText("no — disabled");
  await carol().getByRole("button", { name: "Enable carol" }).focus();
  await page.keyboard.press("Enter");
  await expect(carol()).toContainText("yes");
  await shot(page, "users");

  await open(page, "Sessions");
  await page.getByLabel("User", { exact: true }).fill("demo");
  await page.getByRole("button", { name: "Search" }).click();
  const sessions = page.getByRole("button", { name: "Revoke session of demo" });
  await expect(sessions.first()).toBeVisible();
  const before = await sessions.count();
  await shot(page, "sessions");
  await sessions.first().click();
  await expect(page.getByRole("status")).not.toBeEmpty();
  await expect(sessions).toHaveCount(before - 1);

  await open(page, "Keys and edges");
  await expect(page.getByRole("table", { name: "Keys" })).toBeVisible();
  await expect(page.getByRole("table", { name: "Edges" })).toBeVisible();
  await shot(page, "keys");

  await open(page, "Audit trail");
  await page.getByLabel("Search audit events").fill(id);
  await page.getByRole("button", { name: "Search" }).click();
  const events = page.getByRole("article");
  await expect(events.first()).toContainText("root");
  await expect(events.first().getByRole("heading", { name: "Before" })).toBeVisible();
  await expect(events.first().getByRole("heading", { name: "After" })).toBeVisible();
  await expect(events.first()).toContainText("inactive");
  await shot(page, "audit");
});
