// The GPU self-check on the page: the worker runs webgpu_trainer.selfcheck on the browser's
// adapter before its first training run (every op family forward and backward and every
// optimizer, against committed float64 references) and posts
//   selfcheck {ok, wrong: ["<case> <check> (<ops>)"], rows: [{case, ops, check, error,
//              tolerance, ok}], seconds, adapter}.
// A failed check shows a plain warning naming the wrong ops; training stays allowed.
// Test hook: window.selfCheck (the last message).

const BANNER_ID = "selfcheck-warning";

function banner() {
  let el = document.getElementById(BANNER_ID);
  if (!el) {
    el = document.createElement("div");
    el.id = BANNER_ID;
    el.className = "banner";
    el.setAttribute("role", "alert");
    el.hidden = true;
    const anchor = document.querySelector("main") ?? document.body.firstChild;
    anchor.parentNode.insertBefore(el, anchor);
  }
  return el;
}

/** The worker's `selfcheck` message: remember it, warn when some op computed wrong results. */
export function showSelfCheck(m) {
  window.selfCheck = m;
  const el = banner();
  const adapter = document.getElementById("adapter");
  const line = m.ok
    ? `self-check: all ${m.rows?.length ?? 0} op checks ok (${(m.seconds ?? 0).toFixed(1)} s)`
    : `self-check: WRONG results for ${(m.wrong ?? []).length} op check(s)`;
  if (adapter) adapter.title = adapter.title.replace(/\nself-check:.*$/s, "") + `\n${line}`;
  if (m.ok) {
    el.hidden = true;
    return;
  }
  el.replaceChildren();
  const h = document.createElement("h2");
  h.textContent = "This GPU computed wrong results in the self-check";
  const p = document.createElement("p");
  p.textContent = "These operations did not match the reference values, so a model trained " +
    "here may be wrong. Training is still allowed. Try another browser, update the GPU " +
    "driver, or run `webgpu-trainer doctor` natively to compare.";
  const ul = document.createElement("ul");
  for (const w of m.wrong ?? []) {
    const li = document.createElement("li");
    li.textContent = w;
    ul.append(li);
  }
  el.append(h, p, ul);
  el.hidden = false;
  console.warn(line, m.wrong);
}
