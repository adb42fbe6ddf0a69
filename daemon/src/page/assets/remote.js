// The remote page's sign-in and registration (served from tcd, no inline script). It
// shows nothing of tc's state: a signed-in session gets the page itself (page.js).
'use strict';

const meta = (n) => document.querySelector('meta[name="' + n + '"]').content;
const CSRF = meta('tc-csrf');

function say(text, ok) {
  const m = document.getElementById('msg');
  m.textContent = text;
  m.className = ok ? 'ok' : 'err';
}

async function post(path, body, csrf) {
  const headers = { 'content-type': 'application/json' };
  if (csrf) headers['x-tc-csrf'] = CSRF;
  const r = await fetch(path, {
    method: 'POST', credentials: 'same-origin', headers, body: JSON.stringify(body || {}),
  });
  const j = await r.json().catch(() => ({}));
  if (!r.ok) throw new Error(j.error || 'HTTP ' + r.status);
  return j;
}

function fromB64u(s) {
  const b = atob(s.replace(/-/g, '+').replace(/_/g, '/'));
  return Uint8Array.from(b, (c) => c.charCodeAt(0)).buffer;
}

function toB64u(buf) {
  let s = '';
  new Uint8Array(buf).forEach((b) => { s += String.fromCharCode(b); });
  return btoa(s).replace(/\+/g, '-').replace(/\//g, '_').replace(/=+$/, '');
}

async function signIn() {
  try {
    const start = await post('/api/signin/start', {}, false);
    const o = start.options.publicKey;
    o.challenge = fromB64u(o.challenge);
    (o.allowCredentials || []).forEach((c) => { c.id = fromB64u(c.id); });
    const c = await navigator.credentials.get({ publicKey: o });
    const r = c.response;
    const credential = {
      id: c.id, rawId: toB64u(c.rawId), type: c.type,
      response: {
        authenticatorData: toB64u(r.authenticatorData),
        clientDataJSON: toB64u(r.clientDataJSON),
        signature: toB64u(r.signature),
        userHandle: r.userHandle ? toB64u(r.userHandle) : null,
      },
    };
    await post('/api/signin/finish', { id: start.id, credential }, false);
    say('signed in', true);
    // Back to where the sign-in was asked (a request's own link, from a notification).
    location.replace(/^\/requests\/[a-z0-9]+$/.test(location.pathname) ? location.pathname : '/');
  } catch (e) {
    say('not signed in: ' + e.message);
  }
}

async function addPasskey() {
  const code = document.getElementById('pk-code').value;
  const name = document.getElementById('pk-name').value;
  document.getElementById('pk-code').value = '';
  try {
    const o = (await post('/api/passkeys/start', { code }, true)).publicKey;
    o.challenge = fromB64u(o.challenge);
    o.user.id = fromB64u(o.user.id);
    (o.excludeCredentials || []).forEach((c) => { c.id = fromB64u(c.id); });
    const c = await navigator.credentials.create({ publicKey: o });
    const credential = {
      id: c.id, rawId: toB64u(c.rawId), type: c.type,
      response: {
        attestationObject: toB64u(c.response.attestationObject),
        clientDataJSON: toB64u(c.response.clientDataJSON),
      },
    };
    const done = await post('/api/passkeys/finish', { credential, name }, true);
    say(done.confirm
      ? 'passkey added: it approves nothing until you confirm it on your computer: ' + done.confirm
      : 'passkey added: sign in with it', true);
  } catch (e) {
    say('passkey not added: ' + e.message);
  }
}

// A registration link's session shows the form, then the sign-in with the new passkey.
document.getElementById('register').hidden = meta('tc-view') !== 'register';
document.getElementById('signin').hidden = false;
document.getElementById('signin-go').addEventListener('click', signIn);
document.getElementById('pk-add').addEventListener('click', addPasskey);
