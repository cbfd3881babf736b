// Hearth's demos: the development-only sign-in of the Todo List and Restaurants demos.
// LOCAL DEVELOPMENT ONLY: it mints the relay's tokens in the page, with the secret that
// scripts/start gives the relay (HEARTH_AUTH_SECRET), so anyone who can open the page can sign
// in as anyone. A real app gets its tokens from an identity provider and never holds the
// secret: it passes the provider's token (or a function returning it) as openFirestore's
// `token`.
export const DEV_SECRET = 'hearth-local-development-secret';

const utf8 = (s) => new TextEncoder().encode(s);
const base64url = (bytes) => btoa(String.fromCharCode(...new Uint8Array(bytes)))
  .replace(/=+$/, '').replace(/\+/g, '-').replace(/\//g, '_');

/** An HS256 JWT `{ sub: uid, exp: in an hour }`, signed with DEV_SECRET (WebCrypto). */
export async function devToken(uid) {
  const part = (o) => base64url(utf8(JSON.stringify(o)));
  const body = `${part({ alg: 'HS256', typ: 'JWT' })}.${part({ sub: uid, exp: Math.floor(Date.now() / 1000) + 3600 })}`;
  const key = await crypto.subtle.importKey('raw', utf8(DEV_SECRET), { name: 'HMAC', hash: 'SHA-256' }, false, ['sign']);
  return `${body}.${base64url(await crypto.subtle.sign('HMAC', key, utf8(body)))}`;
}

/** The uid of a typed name: its letters and digits, lowercased, runs of others as `-`. */
export const uidOf = (name) => name.trim().toLowerCase().replace(/[^a-z0-9]+/g, '-').replace(/^-+|-+$/g, '');
