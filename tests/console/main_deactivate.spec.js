// The main scenario, second half: the administrator deactivates the client; the Rust test then
// sees its token refused at every Envoy worker.
import { expect, test } from "@playwright/test";
import { open, shot, signIn, vendorClient } from "./helpers.js";

test("an administrator deactivates the client", async ({ page }) => {
  const id = vendorClient();
  await signIn(page, "root");
  await open(page, "Clients");
  const row = page.getByRole("row").filter({ hasText: id });
  await row.getByRole("button", { name: `Deactivate ${id}` }).click();
  await expect(page.getByRole("status")).not.toBeEmpty();
  await expect(page.getByRole("alert")).toBeHidden();
  await expect(page.getByRole("row").filter({ hasText: id })).toContainText("inactive");
  await shot(page, "clients");
});
