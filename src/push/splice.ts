/**
 * M7, pure: fields added to objects inside a JSON text without writing the rest again. The relay
 * adds `realm_url` and `realm_name` to two objects of a notification and changes nothing else:
 * re-serialising the whole body would also rewrite what JSON lets a server spell its own way
 * (an integer beyond 2^53, `1.0`, `\u00e9`, spacing). Each addition goes just before the closing
 * brace of its object, so every byte the server sent stays where it was, in order.
 */

/** A JSON path as a map key. */
const keyOf = (path: readonly string[]): string => JSON.stringify(path);

interface Frame {
  path: string[];
  object: boolean;
  /** The last member name read (objects), or the index of the next element (arrays). */
  key: string;
  index: number;
  members: number;
}

/** The index just past the string that opens at `from` (its quote). */
function stringEnd(text: string, from: number): number {
  for (let i = from + 1; i < text.length; i++) {
    if (text[i] === '\\') i++;
    else if (text[i] === '"') return i + 1;
  }
  return text.length;
}

/**
 * Where each object at one of `paths` closes in `text` (valid JSON, as JSON.parse accepted it):
 * the index of its `}`, and whether it has no member.
 */
export function objectEnds(text: string, paths: readonly (readonly string[])[]): Map<string, { at: number; empty: boolean }> {
  const wanted = new Set(paths.map(keyOf));
  const found = new Map<string, { at: number; empty: boolean }>();
  const stack: Frame[] = [];
  let expectKey = false;
  for (let i = 0; i < text.length; i++) {
    const ch = text[i];
    const top = stack[stack.length - 1];
    if (ch === '"') {
      const end = stringEnd(text, i);
      if (top?.object && expectKey) {
        top.key = JSON.parse(text.slice(i, end)) as string;
        top.members++;
        expectKey = false;
      }
      i = end - 1;
    } else if (ch === '{' || ch === '[') {
      const path = top ? [...top.path, top.object ? top.key : String(top.index)] : [];
      stack.push({ path, object: ch === '{', key: '', index: 0, members: 0 });
      expectKey = ch === '{';
    } else if (ch === '}' || ch === ']') {
      const frame = stack.pop()!;
      const key = keyOf(frame.path);
      if (frame.object && wanted.has(key)) found.set(key, { at: i, empty: frame.members === 0 });
    } else if (ch === ',' && top) {
      if (top.object) expectKey = true;
      else top.index++;
    }
  }
  return found;
}

/** An object's members to add, in order, at its path. */
export interface Addition {
  path: readonly string[];
  members: ReadonlyArray<[string, unknown]>;
}

/**
 * `text` with each addition's members written as the last ones of its object; undefined when an
 * object named is not in the text (nothing is then changed).
 */
export function spliceMembers(text: string, additions: readonly Addition[]): string | undefined {
  const wanted = additions.filter((a) => a.members.length > 0);
  const ends = objectEnds(
    text,
    wanted.map((a) => a.path),
  );
  const at = wanted.map((a) => ({ addition: a, end: ends.get(keyOf(a.path)) }));
  if (at.some((x) => x.end === undefined)) return undefined;
  let out = text;
  // From the last position back, so the earlier ones stay where they were found.
  for (const { addition, end } of at.sort((a, b) => b.end!.at - a.end!.at)) {
    const members = addition.members.map(([k, v]) => `${JSON.stringify(k)}:${JSON.stringify(v)}`).join(',');
    out = `${out.slice(0, end!.at)}${end!.empty ? '' : ','}${members}${out.slice(end!.at)}`;
  }
  return out;
}
