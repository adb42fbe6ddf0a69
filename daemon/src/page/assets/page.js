// The approval page's one script (served from tcd, no inline script, no network but
// this page's own origin). Every text from tcd is already escaped for display and is
// inserted with textContent, never as HTML.
'use strict';

const CSRF = document.querySelector('meta[name="tc-csrf"]').content;
const cards = new Map();
let state = null;
let skew = 0; // server clock minus this clock, ms

function el(tag, cls, text) {
  const e = document.createElement(tag);
  if (cls) e.className = cls;
  if (text !== undefined) e.textContent = text;
  return e;
}

function say(text, ok) {
  const m = document.getElementById('msg');
  m.textContent = text;
  m.className = ok ? 'ok' : 'err';
}

async function post(path, body) {
  const r = await fetch(path, {
    method: 'POST',
    credentials: 'same-origin',
    headers: { 'content-type': 'application/json', 'x-tc-csrf': CSRF },
    body: JSON.stringify(body || {}),
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

async function addPasskey() {
  const code = document.getElementById('pk-code').value;
  const name = document.getElementById('pk-name').value;
  // Single use either way: a spent or wrong code is not left on the screen.
  document.getElementById('pk-code').value = '';
  try {
    const o = (await post('/api/passkeys/start', { code })).publicKey;
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
    const done = await post('/api/passkeys/finish', { credential, name });
    say(done.confirm
      ? 'passkey added: it approves nothing until you confirm it on your terminal: ' + done.confirm
      : 'passkey added', true);
    refresh();
  } catch (e) {
    say('passkey not added: ' + e.message);
  }
}

async function approvePasskey(id, grant) {
  // The grant is asked with the challenge: the assertion approves with that grant.
  const o = (await post('/api/requests/' + id + '/approve/start', { grant })).publicKey;
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
  return post('/api/requests/' + id + '/approve/finish', { credential });
}

async function approve(id, card, grant) {
  try {
    let done;
    if (useTotp()) {
      const code = card.querySelector('input.totp').value;
      done = await post('/api/requests/' + id + '/approve/totp', { code, grant });
    } else {
      done = await approvePasskey(id, grant);
    }
    say(done.grant
      ? 'approved ' + id + ' with grant ' + done.grant + ': similar calls run without asking until it ends or you revoke it'
      : 'approved ' + id + ': the agent\'s identical retry runs it once', true);
  } catch (e) {
    say('not approved: ' + e.message);
  }
  refresh();
}

async function decline(id, card) {
  try {
    const reason = card.querySelector('input.reason').value;
    await post('/api/requests/' + id + '/decline', { reason });
    say('declined ' + id, true);
  } catch (e) {
    say('not declined: ' + e.message);
  }
  refresh();
}

function useTotp() {
  return state && state.mode === 'guarded' && state.passkeys === 0;
}

function row(dl, k, v, pre) {
  dl.append(el('dt', '', k));
  const dd = el('dd');
  if (pre) dd.append(pre); else dd.textContent = v;
  dl.append(dd);
  return dd;
}

function diff(text) {
  const pre = el('pre', 'diff');
  for (const line of text.split('\n')) {
    let cls = '';
    if (line.startsWith('+') && !line.startsWith('+++')) cls = 'add';
    else if (line.startsWith('-') && !line.startsWith('---')) cls = 'del';
    else if (line.startsWith('@@')) cls = 'hunk';
    pre.append(el('span', cls, line));
  }
  return pre;
}

function newCard(r) {
  const card = el('div', 'req');
  card.dataset.id = r.id;
  const h = el('h3');
  h.append(el('span', 'tool', r.tool), el('span', 'status'), el('code', 'rid', r.id));
  card.append(h);
  const dl = el('dl');
  row(dl, 'vault', r.vault);
  row(dl, 'caller', r.caller);
  card.age = row(dl, 'age', '');
  card.left = row(dl, 'time left', '');
  row(dl, 'covers', r.covers);
  row(dl, 'state', r.state_fp);
  card.reasonRow = row(dl, 'reason', '');
  row(dl, 'arguments', '', el('pre', 'args', r.args));
  if (r.preview) row(dl, 'preview', '', diff(r.preview));
  card.append(dl);
  const a = el('div', 'actions');
  const totp = el('input', 'totp');
  totp.placeholder = 'code from your authenticator app';
  totp.autocomplete = 'one-time-code';
  totp.inputMode = 'numeric';
  const ok = el('button', 'approve', 'Approve');
  ok.type = 'button';
  ok.addEventListener('click', () => approve(r.id, card));
  const reason = el('input', 'reason');
  reason.placeholder = 'reason (optional)';
  const no = el('button', 'decline', 'Decline');
  no.type = 'button';
  no.addEventListener('click', () => decline(r.id, card));
  a.append(totp, ok);
  if (r.grant) {
    const form = grantForm(r, card);
    const more = el('button', 'grant-open', 'Approve, and allow similar…');
    more.type = 'button';
    more.addEventListener('click', () => { form.hidden = !form.hidden; });
    a.append(more);
    card.grantForm = form;
  }
  a.append(reason, no);
  card.append(a);
  if (card.grantForm) card.append(card.grantForm);
  card.actions = a;
  card.totp = totp;
  return card;
}

// "Approve, and allow similar…": each argument of the request, a file one with a glob
// (prefilled with its own folder), any other exact unless "any value" is ticked; the
// grant's life and uses; and what it would cover, in words, as the human edits it.
function grantForm(r, card) {
  const f = el('div', 'grant');
  f.hidden = true;
  f.append(el('p', '', 'Approve this request, and let later calls run without asking while all of this holds:'));
  const ul = el('ul', 'grant-scope');
  ul.append(el('li', '', 'tool ' + r.tool + ', in vault ' + r.vault + ', from caller ' + r.caller));
  const args = [];
  for (const a of r.grant) {
    const li = el('li', 'grant-arg');
    li.dataset.arg = a.name;
    const x = { a };
    if (a.file) {
      x.glob = el('input', 'glob');
      x.glob.value = a.glob;
      x.glob.spellcheck = false;
      li.append(el('span', '', a.name + ' names files under '), x.glob);
    } else {
      li.append(el('span', '', a.name + ' exactly as shown: '), el('code', 'value', a.value));
      if (a.any) {
        x.any = el('input', 'any');
        x.any.type = 'checkbox';
        const any = el('label', 'any');
        any.append(x.any, document.createTextNode(' any value'));
        li.append(any);
      } else {
        li.append(el('span', 'note', ' (a path tc could not resolve under the vault root: only this one)'));
      }
    }
    args.push(x);
    ul.append(li);
  }
  const minutes = el('input', 'minutes');
  minutes.type = 'number';
  minutes.min = '1';
  minutes.value = '15';
  const uses = el('input', 'uses');
  uses.type = 'number';
  uses.min = '1';
  uses.placeholder = 'no limit';
  const life = el('li', 'grant-life');
  life.append(el('span', '', 'for '), minutes, el('span', '', ' minutes, at most '), uses, el('span', '', ' uses'));
  ul.append(life);
  const words = el('p', 'grant-words');
  const go = el('button', 'grant-approve', 'Approve and allow');
  go.type = 'button';
  f.append(ul, words, go);
  const ask = () => {
    const g = { seconds: Math.round(Number(minutes.value) * 60) || 0, uses: parseInt(uses.value, 10) || 0, globs: {}, any: [] };
    for (const x of args) {
      if (x.glob) g.globs[x.a.key] = x.glob.value;
      else if (x.any && x.any.checked) g.any.push(x.a.key);
    }
    return g;
  };
  const describe = () => {
    const g = ask();
    const parts = [];
    let exact = 0;
    for (const x of args) {
      if (x.glob) parts.push(x.a.name + ' under ' + x.glob.value);
      else if (x.any && x.any.checked) parts.push(x.a.name + ': any');
      else exact += 1;
    }
    if (exact) parts.push(exact + ' other argument' + (exact === 1 ? '' : 's') + ' exactly as now');
    words.textContent = 'Covers ' + r.tool + ' in vault ' + r.vault + ' from ' + r.caller + ': ' +
      (parts.join('; ') || 'this exact call') + '; for ' + (g.seconds ? secs(g.seconds * 1000) : '15 min') +
      (g.uses ? ', ' + g.uses + ' use' + (g.uses === 1 ? '' : 's') : ', any number of uses') + '.';
  };
  f.addEventListener('input', describe);
  f.addEventListener('change', describe);
  describe();
  go.addEventListener('click', () => approve(r.id, card, ask()));
  return f;
}

async function revoke(id) {
  try {
    await post('/api/grants/' + encodeURIComponent(id) + '/revoke');
    say('revoked ' + id + ': the next similar call asks you again', true);
  } catch (e) {
    say('not revoked: ' + e.message);
  }
  refresh();
}

function when(ms) {
  return ms ? new Date(ms).toLocaleTimeString() : 'never';
}

// The grants list: drawn when a state arrives (not every second, so a Revoke button is
// not replaced under the pointer).
function renderGrants(now) {
  const body = document.querySelector('#grants tbody');
  document.getElementById('nogrants').hidden = state.grants.length > 0;
  document.getElementById('grants').hidden = state.grants.length === 0;
  body.replaceChildren(...state.grants.map((g) => {
    const tr = el('tr', 'grant-row');
    tr.dataset.id = g.id;
    const live = g.status === 'live';
    const expires = live ? 'in ' + secs(g.expires_at_ms - now) : when(g.expires_at_ms);
    const left = g.uses_left === null ? 'no limit' : String(g.uses_left);
    for (const [cls, v] of [['gid', g.id], ['scope', g.scope], ['', g.tool], ['', g.vault], ['', g.caller],
      ['', expires], ['used', String(g.used)], ['left', left], ['last', when(g.last_used_at_ms)]]) {
      tr.append(el('td', cls, v));
    }
    const st = el('td', 'status-cell');
    st.append(el('span', 'status ' + g.status.replace(' ', '-'), g.status));
    const act = el('td');
    if (live && !state.read_only) {
      const b = el('button', 'revoke', 'Revoke');
      b.type = 'button';
      b.addEventListener('click', () => revoke(g.id));
      act.append(b);
    }
    tr.append(st, act);
    return tr;
  }));
}

function secs(ms) {
  const s = Math.max(0, Math.floor(ms / 1000));
  return s < 120 ? s + ' s' : Math.floor(s / 60) + ' min';
}

function render() {
  if (!state) return;
  const now = Date.now() + skew;
  const list = document.getElementById('requests');
  const seen = new Set();
  for (const r of state.requests) {
    seen.add(r.id);
    let card = cards.get(r.id);
    if (!card) {
      card = newCard(r);
      cards.set(r.id, card);
    }
    list.append(card); // keeps the server's order (newest first)
    const status = r.status === 'pending' && r.expires_at_ms <= now ? 'expired' : r.status;
    card.className = 'req ' + status + (location.pathname === '/requests/' + r.id ? ' focus' : '');
    const badge = card.querySelector('.status');
    badge.textContent = status;
    badge.className = 'status ' + status;
    card.age.textContent = secs(now - r.raised_at_ms) + ' ago';
    card.left.textContent = status === 'pending' ? secs(r.expires_at_ms - now) : '—';
    card.reasonRow.textContent = r.reason || '—';
    card.actions.hidden = status !== 'pending' || state.read_only;
    if (card.grantForm && card.actions.hidden) card.grantForm.hidden = true;
    card.totp.hidden = !useTotp();
  }
  for (const [id, card] of cards) {
    if (!seen.has(id)) { card.remove(); cards.delete(id); }
  }
  document.getElementById('empty').hidden = state.requests.length > 0;
  document.getElementById('mode').textContent = state.mode + ' mode';
  document.getElementById('passkeys').textContent =
    state.passkeys + ' passkey' + (state.passkeys === 1 ? '' : 's') + ' registered';
  const body = document.querySelector('#history tbody');
  body.replaceChildren(...state.history.map((h) => {
    const tr = el('tr', h.what);
    for (const v of [new Date(h.at_ms).toLocaleString(), h.what, h.request_id, h.tool,
      h.vault, h.caller, h.note]) tr.append(el('td', '', v));
    return tr;
  }));
}

function take(s) {
  state = s;
  skew = s.now_ms - Date.now();
  render();
  renderGrants(s.now_ms);
}

async function refresh() {
  const r = await fetch('/api/state', { credentials: 'same-origin' });
  if (r.ok) take(await r.json());
}

function live() {
  const badge = document.getElementById('live');
  const es = new EventSource('/api/events');
  es.addEventListener('state', (e) => take(JSON.parse(e.data)));
  es.addEventListener('open', () => { badge.textContent = 'live'; badge.className = 'badge on'; });
  es.addEventListener('error', () => { badge.textContent = 'reconnecting…'; badge.className = 'badge off'; });
}

document.getElementById('pk-add').addEventListener('click', addPasskey);
// Over HTTPS this is the remote page, served only under its public_url's name.
document.getElementById('hostnote').hidden =
  location.hostname === 'localhost' || location.protocol === 'https:';
live();
setInterval(render, 1000);
