// The other pages, each acted on as an administrator would and pictured: a user disabled and
// enabled (by keyboard), a session revoked, the keys and edges, the audit trail of what the
// console did, before and after side by side.
import { expect, test } from "@playwright/test";
import { open, shot, signIn, vendorClient } from "./helpers.js";

test.beforeEach(async ({ page }) => {
  await signIn(page, "root");
});

test("users: disable and enable, by keyboard too", async ({ page }) => {
  await open(page, "Users");
  const carol = () => page.getByRole("row").filter({ hasText: "carol" });
  await carol().getByRole("button", { name: "Disable carol" }).click();
  await expect(page.getByRole("status")).not.toBeEmpty();
  await expect(carol()).toContainText("no — disabled");
  await carol().getByRole("button", { name: "Enable carol" }).focus();
  await page.keyboard.press("Enter");
  await expect(carol()).toContainText("yes");
  await expect(page.getByRole("alert")).toBeHidden();
  await shot(page, "users");
});

test("sessions: a user's sessions, one revoked", async ({ page }) => {
  await open(page, "Sessions");
  await page.getByLabel("Sessions of the users whose name starts with").fill("dem");
  await page.getByRole("button", { name: "Search" }).click();
  const sessions = page.getByRole("button", { name: "Revoke session of demo" });
  await expect(sessions.first()).toBeVisible();
  const before = await sessions.count();
  await shot(page, "sessions");
  await sessions.first().click();
  await expect(page.getByRole("status")).not.toBeEmpty();
  await expect(sessions).toHaveCount(before - 1);
});

test("keys and edges: which edge holds which key", async ({ page }) => {
  await open(page, "Keys and edges");
  await expect(page.getByRole("table", { name: "Keys" })).toBeVisible();
  await expect(page.getByRole("table", { name: "Edges" })).toBeVisible();
  await expect(page.getByRole("row").filter({ hasText: "envoy-edge" })).not.toHaveCount(0);
  await shot(page, "keys");
  // No next key yet: rotating publishes one, and the ring shows it.
  const rows = await page.getByRole("table", { name: "Keys" }).getByRole("row").count();
  await page.getByRole("button", { name: "Rotate the signing key" }).click();
  await expect(page.getByRole("status")).not.toBeEmpty();
  await expect(page.getByRole("alert")).toBeHidden();
  await expect(page.getByRole("table", { name: "Keys" }).getByRole("row")).toHaveCount(rows + 1);
});

test("audit: the console's acts, searchable, before and after", async ({ page }) => {
  const id = vendorClient();
  await open(page, "Audit trail");
  await page.getByLabel("Search audit events").fill(id);
  await page.getByRole("button", { name: "Search" }).click();
  const events = page.getByRole("article");
  // Newest first: the deactivation, by root through the console, then the activation.
  const last = events.first();
  await expect(last.getByRole("heading", { level: 2 })).toHaveText(`client.deactivate ${id}`);
  await expect(last).toContainText("by root through admin-console");
  await expect(last.getByRole("region", { name: "Before" })).toContainText('"active": true');
  await expect(last.getByRole("region", { name: "After" })).toContainText('"active": false');
  await expect(events.nth(1).getByRole("heading", { level: 2 })).toHaveText(`client.activate ${id}`);
  await shot(page, "audit");
});
