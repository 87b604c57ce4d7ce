// The main scenario, first half: the administrator signs in, finds the client that registered
// with a vendor statement among the pending ones (vendor, name, what it asks for, expiry), and
// activates it narrowed to client_credentials. The Rust test then uses the client's token
// through Envoy.
import { expect, test } from "@playwright/test";
import { open, shot, signIn, vendorClient } from "./helpers.js";

test("an administrator activates a pending vendor client, narrowed", async ({ page }) => {
  const id = vendorClient();
  await page.goto("./");
  await expect(page.getByRole("heading", { name: "Sign in" })).toBeVisible();
  await shot(page, "sign-in");
  await signIn(page, "root");
  await open(page, "Pending clients");
  const row = page.getByRole("row").filter({ hasText: id });
  await expect(row).toContainText("acme");
  await expect(row).toContainText("Console Test App");
  await expect(row.getByRole("checkbox", { name: "client_credentials" })).toBeChecked();
  await expect(row.getByRole("checkbox", { name: "password" })).toBeChecked();
  await expect(row).toContainText(/\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC/);
  await shot(page, "pending");
  // Narrowed: the password grant the statement allows is withheld.
  await row.getByRole("checkbox", { name: "password" }).uncheck();
  await row.getByRole("button", { name: `Activate ${id}` }).click();
  await expect(page.getByRole("status")).toContainText(id);
  await expect(page.getByRole("alert")).toBeHidden();
  await expect(page.getByRole("row").filter({ hasText: id })).toHaveCount(0);
  await open(page, "Clients");
  const active = page.getByRole("row").filter({ hasText: id });
  await expect(active).toContainText("active");
  await expect(active.getByRole("cell", { name: "client_credentials", exact: true })).toBeVisible();
});
