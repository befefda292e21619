// The one module of small helpers every app of web/ shares: element lookup and creation (`$`,
// `el`) and number formatting.

export const $ = (id) => document.getElementById(id);

/** Accuracy values are fractions in [0, 1]; tolerate percentages too. */
export const frac = (a) => (a == null || Number.isNaN(+a) ? null : +a > 1.0001 ? +a / 100 : +a);
export const pct = (a, digits = 2) => (a == null ? "–" : `${(frac(a) * 100).toFixed(digits)}%`);
export const num = (x, digits = 4) =>
  (x == null || !Number.isFinite(+x) ? "–" : (+x).toFixed(digits));

/** A duration for people: "42 s", "3:07" (m:ss), "1:02:03" (h:mm:ss), "3 d 4 h" (a day or
 * more); "–" for no value. Seconds are rounded to whole ones. */
export function duration(seconds) {
  if (seconds == null || !Number.isFinite(+seconds) || seconds < 0) return "–";
  const s = Math.round(+seconds);
  const two = (n) => String(n).padStart(2, "0");
  if (s < 60) return `${s} s`;
  if (s < 3600) return `${Math.floor(s / 60)}:${two(s % 60)}`;
  if (s < 86400) return `${Math.floor(s / 3600)}:${two(Math.floor(s / 60) % 60)}:${two(s % 60)}`;
  return `${Math.floor(s / 86400)} d ${Math.floor(s / 3600) % 24} h`;
}

export function humanBytes(n) {
  if (!Number.isFinite(n)) return "";
  const u = ["B", "KB", "MB", "GB"];
  let i = 0;
  while (n >= 1024 && i < u.length - 1) { n /= 1024; i++; }
  return `${n.toFixed(i ? 1 : 0)} ${u[i]}`;
}

export function humanCount(n) {
  if (!Number.isFinite(n)) return "";
  if (n >= 1e6) return `${(n / 1e6).toFixed(2)} M`;
  if (n >= 1e3) return `${(n / 1e3).toFixed(1)} k`;
  return String(n);
}

export function cssVar(name, fallback) {
  const v = getComputedStyle(document.documentElement).getPropertyValue(name).trim();
  return v || fallback;
}

/** A new element `tag` with `props` (properties; names with a dash and `role` are attributes,
 *  e.g. "aria-label") and children `kids` (nodes or strings). */
export function el(tag, props = {}, ...kids) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(props)) {
    if (k === "role" || k.includes("-")) e.setAttribute(k, v);
    else e[k] = v;
  }
  e.append(...kids);
  return e;
}
