// The settings' values read from a user's text: the form's number fields, share links and
// settings files share one strict parser (decimal numbers only, as the command line: no
// "0x10", no "0.0.1", nothing that is not finite) and one way of quoting the user's text in a
// message (short: a long value is cut). And lookups by a key the user chose (a link's
// ?constructor=2, a file's "__proto__") that never reach an inherited property.

const DECIMAL = /^[+-]?(\d+\.?\d*|\.\d+)(e[+-]?\d+)?$/i;
const NOT_FINITE = /^[+-]?(inf|infinity|nan)$/i;
const QUOTE_MAX = 40;  // characters of a user's value a message quotes

/** ``text`` cut to QUOTE_MAX characters for a message (an ellipsis ends a cut one). */
export function cut(text) {
  const t = String(text);
  return t.length > QUOTE_MAX ? `${t.slice(0, QUOTE_MAX - 1)}…` : t;
}

/** ``text`` in quotes for a message, cut to QUOTE_MAX characters. */
export const quote = (text) => `“${cut(text)}”`;

/** ``obj[key]`` when ``obj`` has it as its own property, else undefined (never a property
 * of Object.prototype such as "constructor" or "__proto__"). */
export const own = (obj, key) =>
  (obj != null && Object.hasOwn(obj, key) ? obj[key] : undefined);

/** The decimal number written in ``text`` (surrounding spaces allowed): ``{value}``, or
 * ``{problem}`` ("is not a number", "is not a decimal number" for 0x10, "is not a finite
 * number" for 1e999). */
export function parseNumber(text) {
  const t = String(text).trim();
  if (DECIMAL.test(t)) {
    const value = Number(t);
    return Number.isFinite(value) ? { value } : { problem: "is not a finite number" };
  }
  if (NOT_FINITE.test(t)) return { problem: "is not a finite number" };
  if (t !== "" && Number.isFinite(Number(t))) return { problem: "is not a decimal number" };
  return { problem: "is not a number" };
}

/** What an int field sends for ``text`` read as ``value``: ``value``, except for plain digits
 * past Number.MAX_SAFE_INTEGER, which a JS number cannot hold (“99999999999999999999”, 20
 * digits, became 1e20, and the checker said “an integer of 21 digits”): those go as the text,
 * so that the message quotes the digits the user typed. (“1e20” is the number 1e20.) */
export function exactInteger(text, value) {
  const t = String(text).trim();
  return /^[+-]?\d+$/.test(t) && !Number.isSafeInteger(value) ? t : value;
}

/** The numbers of ``text`` separated by commas or spaces: ``{value: [numbers]}``, or
 * ``{problem}`` naming the first item that is not one, e.g. "has “x”, which is not a
 * number". */
export function parseList(text) {
  const value = [];
  for (const item of String(text).split(/[\s,]+/).filter(Boolean)) {
    const n = parseNumber(item);
    if (n.problem) return { problem: `has ${quote(item)}, which ${n.problem}` };
    value.push(n.value);
  }
  return { value };
}

/** The deepest JSON nesting (arrays / objects inside each other) may be in a settings file or
 * a link's layers: the server's limit for a JSON body (host/bodies.py MAX_DEPTH). */
export const MAX_DEPTH = 32;

/** How deep arrays / objects nest in the JSON text ``text`` (brackets inside strings do not
 * count), counted up to ``stop`` + 1: checked before JSON.parse, whose reviver (and the
 * page's walks over the value) recurse once per level, so that a file of 100,000 "[" is
 * named as too deep instead of failing with "Maximum call stack size exceeded". */
export function nestingDepth(text, stop = MAX_DEPTH) {
  let depth = 0;
  let most = 0;
  let inString = false;
  for (let i = 0; i < text.length; i++) {
    const c = text[i];
    if (inString) {
      if (c === "\\") i++;
      else if (c === "\"") inString = false;
    } else if (c === "\"") {
      inString = true;
    } else if (c === "[" || c === "{") {
      most = Math.max(most, ++depth);
      if (most > stop) return most;
    } else if (c === "]" || c === "}") {
      depth--;
    }
  }
  return most;
}
