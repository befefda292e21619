// Short help on the controls: an (i) toggletip next to a label. The button toggles a note
// below it (keyboard: Enter / Space; Escape closes); the note is plain text in the page, so
// touch screens and screen readers get it too, not only a hover title.
//
// toggletip(id, label, text): the [button, note] pair for form.js's fields;
// enhanceHelp(root): an (i) after every element of ``root`` with data-help="text" (index.html).

let count = 0;

/** The (i) button and its note (hidden until pressed); ``label`` names the control. */
export function toggletip(id, label, text) {
  const note = Object.assign(document.createElement("p"), {
    className: "help-note", id: `${id}-help`, textContent: text, hidden: true,
  });
  const button = Object.assign(document.createElement("button"), {
    type: "button", className: "tip", textContent: "i",
  });
  button.setAttribute("aria-label", `About ${label}`);
  button.setAttribute("aria-expanded", "false");
  button.setAttribute("aria-controls", note.id);
  button.addEventListener("click", (ev) => {
    ev.preventDefault();
    ev.stopPropagation();  // a tip inside <summary> or <label> must not toggle those
    const open = note.hidden;
    note.hidden = !open;
    button.setAttribute("aria-expanded", String(open));
  });
  button.addEventListener("keydown", (ev) => {
    if (ev.key === "Escape" && !note.hidden) {
      note.hidden = true;
      button.setAttribute("aria-expanded", "false");
    }
  });
  return [button, note];
}

/** Add a toggletip after each ``[data-help]`` element of ``root`` (its note after the
 * element's parent's content when ``data-help-in`` names a container id). */
export function enhanceHelp(root = document) {
  for (const el of root.querySelectorAll("[data-help]")) {
    if (el.dataset.helpDone) continue;
    el.dataset.helpDone = "1";
    const label = el.dataset.helpLabel || el.textContent.trim();
    const [button, note] = toggletip(el.id || `help${++count}`, label, el.dataset.help);
    el.after(button);
    const box = el.dataset.helpIn ? document.getElementById(el.dataset.helpIn) : null;
    if (box) box.append(note);
    else button.after(note);
  }
}
