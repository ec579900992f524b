/** Error text on one line (a file's JSON error, say, may carry a newline). */
export function oneLine(text: string): string {
  return text.replace(/\s*\n\s*/g, ' ').trim();
}

export class ConfigError extends Error {
  override name = 'ConfigError';
}
