// The page's layout on narrow screens (a phone): the settings fold to their heading (a "Show
// settings" button) so the tabs and charts come right after the run bar; they unfold when asked
// to, when a field is marked invalid, and when the screen gets wide. The run bar's compact
// form is CSS (dashboard.css).

import { $ } from "../lib/util.js";

export const NARROW = "(max-width: 820px)";

/** Fold (``folded`` true) or unfold the settings card. */
function fold(folded) {
  $("settings").classList.toggle("folded", folded);
  const btn = $("settings-toggle");
  btn.setAttribute("aria-expanded", String(!folded));
  btn.textContent = folded ? "Show settings" : "Hide settings";
}

/** Unfold the settings (folded on a phone: a field marked there must show). */
export function showSettings() {
  fold(false);
}

/** Fold the settings on a narrow screen (once, at boot) and keep them foldable. */
export function setupLayout() {
  const narrow = matchMedia(NARROW);
  fold(narrow.matches);
  narrow.addEventListener("change", (ev) => fold(ev.matches));
  $("settings-toggle").addEventListener("click", () =>
    fold(!$("settings").classList.contains("folded")));
  // a field marked invalid (the server's check, a share link) must be seen
  new MutationObserver(() => {
    if ($("settings").querySelector('[aria-invalid="true"]')) fold(false);
  }).observe($("settings"), { subtree: true, attributes: true, attributeFilter: ["aria-invalid"] });
}
