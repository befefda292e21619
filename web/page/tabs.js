// The view tabs (WAI-ARIA tabs pattern): Dashboard, Inside the model, Build, Results, Try it,
// Kernels, Your work. Arrow keys / Home / End move between tabs; a `tabchange` event (detail:
// the tab's name, e.g. "model") tells the views which panel is visible, so hidden views do no work.

const NAMES = ["dashboard", "model", "build", "results", "try", "kernels", "work"];

/** The name of the visible panel. */
export function activeTab() {
  return NAMES.find((n) =>
    document.getElementById(`tab-${n}`)?.getAttribute("aria-selected") === "true");
}

/** Show panel `name` (one of NAMES); `focus`: move keyboard focus to its tab. */
export function showTab(name, { focus = false } = {}) {
  for (const n of NAMES) {
    const tab = document.getElementById(`tab-${n}`);
    const on = n === name;
    tab.setAttribute("aria-selected", String(on));
    tab.tabIndex = on ? 0 : -1;
    document.getElementById(`panel-${n}`).hidden = !on;
    if (on && focus) tab.focus();
  }
  document.dispatchEvent(new CustomEvent("tabchange", { detail: name }));
}

export function setupTabs() {
  for (const n of NAMES) {
    const tab = document.getElementById(`tab-${n}`);
    tab.addEventListener("click", () => showTab(n));
    tab.addEventListener("keydown", (ev) => {
      const i = NAMES.indexOf(n);
      const to = { ArrowRight: i + 1, ArrowLeft: i - 1, Home: 0, End: NAMES.length - 1 }[ev.key];
      if (to === undefined) return;
      ev.preventDefault();
      showTab(NAMES[(to + NAMES.length) % NAMES.length], { focus: true });
    });
  }
}
