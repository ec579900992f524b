import { translateRequest, type Translated } from '../../src/changes/app-parts.js';
import { FormFields } from '../../src/http/form-fields.js';

/** The realm the content tests' absolute links are on. */
export const REALM_URL = 'https://chat.example.com';

/** What the changes make of a message the app (shown 277) sends to a server at `real`: its form, and the outcome. */
export function translatedForm(content: string, real = 185, realmUrl = REALM_URL): { form: FormFields; done: Translated } {
  const form = new FormFields(`type=stream&to=5&topic=t&content=${encodeURIComponent(content)}`);
  const done = translateRequest('POST /messages', form, real, 277, {}, { realmUrl });
  return { form, done };
}

/** The content the upstream at `real` receives for the app's `content` (the refusal's message when refused). */
export function sentAs(content: string, real = 185, realmUrl = REALM_URL): string {
  const { form, done } = translatedForm(content, real, realmUrl);
  return done.refusal ?? form.get('content')!;
}
