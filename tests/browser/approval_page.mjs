// Drives Debian's chromium (playwright-core, headless, no network but loopback) with a
// CDP virtual authenticator (user verification on) against tcd's approval page, for
// tests/tests/approver/page_browser.rs; with `mobile`, as a phone (viewport, touch) on the
// remote HTTPS page (tests/tests/approver/page_remote.rs): `resolve` maps its name, `spki`
// is the pin of tcd's certificate (it is then valid, not an error Chrome would refuse
// WebAuthn over). One JSON command per stdin line, one JSON answer per
// stdout line: {"ok": true, ...} or {"ok": false, "error": "..."}.
import { createRequire } from 'node:module';
import readline from 'node:readline';

const require = createRequire(import.meta.url);
const { chromium } = require(process.env.TC_PLAYWRIGHT_CORE);

const TIMEOUT = 20000;
let browser, context, page, contextOptions;

// A phone: a small touch screen, a mobile user agent.
const PHONE = {
  viewport: { width: 390, height: 760 }, deviceScaleFactor: 2, isMobile: true, hasTouch: true,
  userAgent: 'Mozilla/5.0 (Linux; Android 14; Pixel 8) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/120.0 Mobile Safari/537.36',
};

async function open({ url, mobile, resolve, spki, waitFor }) {
  const extra = spki ? [`--ignore-certificate-errors-spki-list=${spki}`] : [];
  browser = await chromium.launch({
    executablePath: '/usr/bin/chromium',
    headless: true,
    args: [
      '--no-sandbox',
      // Nothing but this machine: every name but localhost (or the one `resolve` maps)
      // fails to resolve.
      `--host-resolver-rules=${resolve || 'MAP * ~NOTFOUND , EXCLUDE localhost'}`,
      ...extra,
      '--disable-background-networking',
      '--disable-component-update',
      '--disable-domain-reliability',
      '--disable-sync',
      '--no-first-run',
      '--no-default-browser-check',
    ],
  });
  contextOptions = mobile ? PHONE : { viewport: { width: 1100, height: 900 } };
  context = await browser.newContext(contextOptions);
  page = await context.newPage();
  page.setDefaultTimeout(TIMEOUT);
  const cdp = await context.newCDPSession(page);
  await cdp.send('WebAuthn.enable');
  await cdp.send('WebAuthn.addVirtualAuthenticator', {
    options: {
      protocol: 'ctap2', transport: 'internal', hasResidentKey: true,
      hasUserVerification: true, isUserVerified: true, automaticPresenceSimulation: true,
    },
  });
  const remote = [];
  page.on('request', (r) => { if (!r.url().startsWith(new URL(url).origin)) remote.push(r.url()); });
  page.remote = remote;
  await page.goto(url);
  await page.waitForSelector(waitFor || '#live.on');
  return {};
}

// The remote page: a passkey added in a registration link's session.
async function registerRemote({ code }) {
  await page.fill('#pk-code', code);
  await page.fill('#pk-name', 'phone key');
  await page.tap('#pk-add');
  return { msg: await message(['passkey added', 'passkey not added']) };
}

// The remote page: signs in with the passkey (a tap), then waits for the live page.
async function signIn() {
  await page.tap('#signin-go');
  await page.waitForSelector('#live.on');
  return { url: page.url() };
}

// Goes to `path` on the same origin and waits for `waitFor`.
async function goto({ path, waitFor }) {
  await page.goto(new URL(path, page.url()).href);
  await page.waitForSelector(waitFor);
  return { url: page.url() };
}

// The remote page: taps "Sign in" expecting a refusal; returns the message.
async function trySignIn() {
  await page.tap('#signin-go');
  return { msg: await message(['not signed in', 'signed in']) };
}

// Taps Approve on `id` (a touch, as on a phone); the message stays on the page.
async function tapApprove({ id }) {
  await page.tap(`${card(id)} button.approve`);
  return { msg: await message(['approved', 'not approved'], true) };
}

// Where `selector` is on the screen (after scrolling it into view) and the screen's size.
async function box({ selector }) {
  await page.locator(selector).scrollIntoViewIfNeeded();
  return { box: await page.locator(selector).boundingBox(), viewport: page.viewportSize(),
    scrollWidth: await page.evaluate(() => document.documentElement.scrollWidth) };
}

// The same URL in a new browser context (no cookie): the status, the text shown, the
// HTML, and what /api/state and /api/events answer there.
async function fresh({ url }) {
  const c = await browser.newContext(contextOptions);
  const p = await c.newPage();
  const resp = await p.goto(url);
  const out = {
    status: resp.status(), text: await p.innerText('body'), html: await p.content(),
    api: await p.evaluate(async () => {
      const a = await fetch('/api/state');
      const e = await fetch('/api/events');
      return [a.status, e.status, await a.text()];
    }),
  };
  await c.close();
  return out;
}

/// Waits until #msg starts with one of `prefixes`; returns its text.
async function message(prefixes, keep) {
  await page.waitForFunction((ps) => {
    const t = document.getElementById('msg').textContent;
    return ps.some((p) => t.startsWith(p));
  }, prefixes);
  const t = await page.textContent('#msg');
  if (!keep) await page.evaluate(() => { document.getElementById('msg').textContent = ''; });
  return t;
}

async function register({ code }) {
  await page.fill('#pk-code', code);
  await page.fill('#pk-name', 'test key');
  await page.click('#pk-add');
  return { msg: await message(['passkey added', 'passkey not added']) };
}

const card = (id) => `.req[data-id="${id}"]`;

async function waitRequest({ id, status }) {
  await page.waitForSelector(`${card(id)} .status.${status || 'pending'}`);
  return {
    text: await page.textContent(card(id)),
    approveVisible: await page.isVisible(`${card(id)} button.approve`),
  };
}

async function approve({ id }) {
  await page.click(`${card(id)} button.approve`);
  return { msg: await message(['approved', 'not approved']) };
}

async function decline({ id, reason }) {
  await page.fill(`${card(id)} input.reason`, reason || '');
  await page.click(`${card(id)} button.decline`);
  return { msg: await message(['declined', 'not declined']) };
}

// "Approve, and allow similar…" on `id`: reads the form as offered (each argument's
// prefilled glob, or whether it offers "any value"), sets `globs` and ticks `any`, the
// minutes and uses when given, and approves; returns the message and the words shown.
async function grantApprove({ id, globs, any, minutes, uses }) {
  const c = card(id);
  if (!(await page.isVisible(`${c} .grant`))) await page.click(`${c} button.grant-open`);
  await page.waitForSelector(`${c} .grant button.grant-approve`);
  const offered = await page.$$eval(`${c} li.grant-arg`, (lis) => lis.map((li) => {
    const g = li.querySelector('input.glob');
    return { arg: li.dataset.arg, glob: g ? g.value : null, any: !!li.querySelector('input.any'), text: li.textContent };
  }));
  const arg = (a) => `${c} li.grant-arg[data-arg="${a}"]`;
  for (const [a, g] of Object.entries(globs || {})) await page.fill(`${arg(a)} input.glob`, g);
  for (const a of any || []) await page.check(`${arg(a)} input.any`);
  if (minutes !== undefined) await page.fill(`${c} input.minutes`, String(minutes));
  if (uses !== undefined) await page.fill(`${c} input.uses`, String(uses));
  const words = await page.textContent(`${c} .grant-words`);
  const scope = await page.textContent(`${c} ul.grant-scope`);
  await page.click(`${c} button.grant-approve`);
  return { msg: await message(['approved', 'not approved']), offered, words, scope };
}

const grantRow = (id) => `#grants tr[data-id="${id}"]`;

// Waits until grant `id` is listed with `status` (and `used` uses, when given), with no
// reload: the list follows the SSE stream.
async function waitGrant({ id, status, used }) {
  await page.waitForFunction(({ sel, status, used }) => {
    const tr = document.querySelector(sel);
    return tr && tr.querySelector('.status').textContent === status &&
      (used === undefined || tr.querySelector('td.used').textContent === String(used));
  }, { sel: grantRow(id), status, used });
  const cells = await page.$$eval(`${grantRow(id)} td`, (tds) => tds.map((td) => td.textContent));
  return { cells, revokeVisible: await page.isVisible(`${grantRow(id)} button.revoke`) };
}

// Each row of the history table as its cells' texts.
async function history() {
  return { rows: await page.$$eval('#history tbody tr', (trs) => trs.map((tr) => [...tr.cells].map((td) => td.textContent))) };
}

async function revoke({ id }) {
  await page.click(`${grantRow(id)} button.revoke`);
  return { msg: await message(['revoked', 'not revoked']) };
}

// In the page: a genuine assertion for `id` (from a fresh challenge), as JSON.
async function assertion({ id }) {
  const credential = await page.evaluate(async (id) => {
    const csrf = document.querySelector('meta[name="tc-csrf"]').content;
    const b64 = (buf) => btoa(String.fromCharCode(...new Uint8Array(buf)))
      .replace(/\+/g, '-').replace(/\//g, '_').replace(/=+$/, '');
    const unb64 = (s) => Uint8Array.from(atob(s.replace(/-/g, '+').replace(/_/g, '/')), (c) => c.charCodeAt(0)).buffer;
    const r = await fetch(`/api/requests/${id}/approve/start`, {
      method: 'POST', headers: { 'content-type': 'application/json', 'x-tc-csrf': csrf }, body: '{}',
    });
    const o = (await r.json()).publicKey;
    o.challenge = unb64(o.challenge);
    (o.allowCredentials || []).forEach((c) => { c.id = unb64(c.id); });
    const c = await navigator.credentials.get({ publicKey: o });
    return {
      id: c.id, rawId: b64(c.rawId), type: c.type,
      response: {
        authenticatorData: b64(c.response.authenticatorData),
        clientDataJSON: b64(c.response.clientDataJSON),
        signature: b64(c.response.signature),
        userHandle: c.response.userHandle ? b64(c.response.userHandle) : null,
      },
    };
  }, id);
  return { credential };
}

// In the page: a request with this page's cookie; `csrf: false` leaves the token out.
async function request({ method, path, body, csrf }) {
  return page.evaluate(async ({ method, path, body, csrf }) => {
    const headers = { 'content-type': 'application/json' };
    if (csrf !== false) headers['x-tc-csrf'] = document.querySelector('meta[name="tc-csrf"]').content;
    const r = await fetch(path, { method, headers, body: body === undefined || body === null ? undefined : JSON.stringify(body) });
    return { status: r.status, body: await r.text() };
  }, { method, path, body, csrf });
}

async function screenshot({ path, selector, viewportOnly }) {
  if (selector) await page.locator(selector).screenshot({ path });
  // A phone's screen at its CSS size (small files; the page is the same).
  else if (viewportOnly) await page.screenshot({ path, scale: 'css' });
  else await page.screenshot({ path, fullPage: true });
  return {};
}

async function reloadCount() {
  return { remote: page.remote, navigations: await page.evaluate(() => performance.getEntriesByType('navigation').length) };
}

const ops = {
  open, register, waitRequest, approve, decline, grantApprove, waitGrant, revoke, history, assertion, request,
  screenshot, reloadCount, registerRemote, signIn, trySignIn, goto, tapApprove, box, fresh,
};

const rl = readline.createInterface({ input: process.stdin });
for await (const line of rl) {
  let out;
  try {
    const cmd = JSON.parse(line);
    out = { ok: true, ...(await ops[cmd.op](cmd)) };
  } catch (e) {
    out = { ok: false, error: String(e && e.stack || e) };
  }
  process.stdout.write(JSON.stringify(out) + '\n');
}
if (browser) await browser.close();
