// paygate hosted checkout: browser wallet (EIP-6963 / EIP-1193), tax totals,
// countdown and live status. Everything the page needs without it is in the
// HTML; this only adds to it. No inline script, no other origin (CSP).
'use strict';
(function () {
  const $ = (id) => document.getElementById(id);
  const show = (el) => { if (el) el.hidden = false; };

  async function api(method, path, body) {
    const res = await fetch(path, {
      method,
      headers: body ? { 'Content-Type': 'application/json' } : {},
      body: body ? JSON.stringify(body) : undefined,
    });
    let env = {};
    try { env = await res.json(); } catch (_) { /* not JSON */ }
    if (!res.ok || env.status !== 'success') {
      const err = new Error(env.message || ('HTTP ' + res.status));
      err.status = res.status;
      throw err;
    }
    return env.data;
  }

  // Wallet discovery: EIP-6963 announcements, else window.ethereum (EIP-1193).
  function discover(onChange) {
    const found = [];
    window.addEventListener('eip6963:announceProvider', (e) => {
      const d = e.detail;
      if (!d || !d.provider || !d.info || found.some((x) => x.info.uuid === d.info.uuid)) return;
      found.push(d);
      onChange(found);
    });
    window.dispatchEvent(new Event('eip6963:requestProvider'));
    setTimeout(() => {
      if (!found.length && window.ethereum) {
        found.push({ info: { uuid: 'injected', name: 'Browser wallet', icon: '' }, provider: window.ethereum });
      }
      onChange(found, true);
    }, 400);
  }

  const walletError = (msgs, e) => (e && e.code === 4001)
    ? msgs['checkout.error.rejected']
    : (msgs['checkout.error.generic'] || '%s').replace('%s', (e && e.message) || String(e));

  // ---- link page: totals and wallet address ----
  const form = $('pay-form');
  if (form) {
    document.querySelectorAll('.js-only').forEach(show);
    const link = form.dataset.link;
    const quote = async () => {
      const net = form.querySelector('input[name=network]:checked');
      const country = $('country').value;
      if (!net || !country) { $('totals').hidden = true; return; }
      try {
        const q = await api('POST', '/api/checkout/quote', { linkId: link, network: net.value, customer: { country } });
        const fmt = (c) => (c / 100).toFixed(2) + ' USDC';
        $('t-sub').textContent = fmt(q.subtotalCents);
        $('t-tax').textContent = fmt(q.taxCents);
        $('t-total').textContent = fmt(q.totalCents);
        show($('totals'));
      } catch (_) { $('totals').hidden = true; }
    };
    form.addEventListener('change', (e) => { if (e.target.name === 'network' || e.target.id === 'country') quote(); });
    quote();
    const connect = $('connect');
    let wallets = [];
    discover((list) => { wallets = list; });
    connect.addEventListener('click', async () => {
      const net = form.querySelector('input[name=network]:checked');
      if (!wallets.length || (net && net.dataset.family !== 'evm')) return;
      try {
        const accounts = await wallets[0].provider.request({ method: 'eth_requestAccounts' });
        if (accounts && accounts[0]) $('wallet').value = accounts[0];
      } catch (_) { /* the customer can type it */ }
    });
    return;
  }

  // ---- checkout page ----
  const card = $('status-card');
  if (!card) return;
  const id = card.dataset.session;
  const initial = card.dataset.status;
  const msgs = JSON.parse(card.dataset.msgs || '{}');
  document.querySelectorAll('.js-only').forEach(show);

  // Copy buttons: the text is the truth, wallets read payment links unevenly.
  document.querySelectorAll('button[data-copy]').forEach((b) => {
    b.addEventListener('click', async () => {
      try {
        await navigator.clipboard.writeText($(b.dataset.copy).textContent.trim());
        const was = b.textContent;
        b.textContent = msgs['checkout.copied'] || 'Copied';
        setTimeout(() => { b.textContent = was; }, 1500);
      } catch (_) { /* clipboard refused: the text stays selectable */ }
    });
  });

  // Countdown to expiresAt.
  const cd = $('countdown');
  if (cd) {
    const end = Date.parse(card.dataset.expires);
    const tick = () => {
      const s = Math.max(0, Math.round((end - Date.now()) / 1000));
      cd.textContent = Math.floor(s / 60) + ':' + String(s % 60).padStart(2, '0');
    };
    tick();
    setInterval(tick, 1000);
  }

  // Live status: server-sent events, polling as the fallback.
  const statusEl = $('status');
  // A transaction attached here that was not the payment (anyone who knew
  // the session's id could submit one) is set aside and the session waits
  // again, with a note the page did not show yet: the server renders the
  // open page with it.
  const waiting = ['payment_session_created', 'wallet_connecting', 'wallet_ready'];
  const render = (snap) => {
    if (waiting.includes(snap.status) && (snap.failureMessage || '') !== (card.dataset.released || '')) location.reload();
    let text = msgs['status.' + snap.status] || snap.status;
    if (snap.status === 'txn_confirming' && snap.required) {
      text += ' · ' + (msgs['status.confirmations'] || '%d/%d').replace('%d', snap.confirmations || 0).replace('%d', snap.required);
    }
    statusEl.textContent = text;
    statusEl.className = 'status s-' + snap.status;
    if (snap.terminal && snap.status !== initial) location.reload(); // the server renders the outcome
  };
  let polling = null;
  const poll = () => {
    if (polling) return;
    polling = setInterval(async () => {
      try {
        const d = await api('GET', '/api/checkout/session/' + id);
        const s = d.session;
        render({ status: s.status, failureMessage: s.failureMessage,
          terminal: ['complete', 'failed', 'cancelled', 'expired'].includes(s.status) });
      } catch (_) { /* next time */ }
    }, 3000);
  };
  if (window.EventSource) {
    const es = new EventSource('/api/checkout/session/' + id + '/events');
    let failures = 0;
    es.addEventListener('status', (e) => { failures = 0; render(JSON.parse(e.data)); });
    es.onerror = () => { if (++failures >= 3) { es.close(); poll(); } };
  } else {
    poll();
  }

  // Browser wallet (EVM): sign the session's EIP-3009 authorization, then
  // the relayer broadcasts it, or the wallet sends transferWithAuthorization.
  const wc = $('wallet-card');
  if (!wc) return;
  const step = $('wallet-step');
  const say = (key, arg) => { step.textContent = (msgs[key] || key).replace('%s', arg || ''); };
  // Wallet steps are reported in order, one after the other, without holding
  // up the payment; before it is sent the payment waits for them, 2 s at most
  // (a slow report must not stop a customer paying), so the session's history
  // reads connecting, ready, broadcast.
  let reported = Promise.resolve();
  const report = (status) => {
    reported = reported.then(() => api('POST', '/api/checkout/session/' + id + '/wallet', { status }).catch(() => {}));
  };
  const word = (hex) => hex.replace(/^0x/, '').toLowerCase().padStart(64, '0');
  const uint = (dec) => BigInt(dec).toString(16).padStart(64, '0');
  const encodeCall = (sel, m, sig) => {
    const s = sig.replace(/^0x/, '');
    const len = s.length / 2;
    return sel + word(m.from) + word(m.to) + uint(m.value) + uint(m.validAfter) + uint(m.validBefore) + word(m.nonce) +
      uint(7 * 32) + uint(len) + s.padEnd(Math.ceil(len / 32) * 64, '0');
  };

  async function pay(p) {
    const buttons = wc.querySelectorAll('button');
    buttons.forEach((b) => { b.disabled = true; });
    try {
      say('checkout.step.connecting');
      report('wallet_connecting');
      const accounts = await p.request({ method: 'eth_requestAccounts' });
      const from = accounts[0];
      const want = wc.dataset.chainHex;
      const have = await p.request({ method: 'eth_chainId' });
      if (BigInt(have) !== BigInt(want)) {
        say('checkout.step.switching', wc.dataset.chainName);
        try {
          await p.request({ method: 'wallet_switchEthereumChain', params: [{ chainId: want }] });
        } catch (e) {
          if (e.code !== 4902) throw e;
          await p.request({ method: 'wallet_addEthereumChain', params: [{ chainId: want, chainName: wc.dataset.chainName,
            nativeCurrency: { name: 'Ether', symbol: 'ETH', decimals: 18 }, rpcUrls: [wc.dataset.rpc] }] });
        }
      }
      report('wallet_ready');
      const typed = JSON.parse(wc.dataset.authorization);
      typed.message.from = from;
      say('checkout.step.signing');
      const sig = await p.request({ method: 'eth_signTypedData_v4', params: [from, JSON.stringify(typed)] });
      say('checkout.step.sending');
      await Promise.race([reported, new Promise((done) => setTimeout(done, 2000))]);
      const m = typed.message;
      if (wc.dataset.relayer === 'true') {
        await api('POST', '/api/checkout/session/' + id + '/authorization',
          { from, validAfter: m.validAfter, validBefore: m.validBefore, signature: sig });
      } else {
        const hash = await p.request({ method: 'eth_sendTransaction',
          params: [{ from, to: wc.dataset.token, data: encodeCall(wc.dataset.selector, m, sig) }] });
        await api('POST', '/api/checkout/submit', { sessionId: id, txHash: hash });
      }
      say('checkout.step.submitted');
    } catch (e) {
      step.textContent = walletError(msgs, e);
      buttons.forEach((b) => { b.disabled = false; });
    }
  }

  // Wallets only ever join the list: the buttons shown stay (a customer's
  // click on one is never lost to a re-render when discovery settles).
  let shown = 0;
  discover((list, settled) => {
    const box = $('wallets');
    list.slice(shown).forEach((w) => {
      const b = document.createElement('button');
      b.type = 'button';
      if (w.info.icon && w.info.icon.startsWith('data:image/')) {
        const img = document.createElement('img');
        img.src = w.info.icon;
        img.alt = '';
        b.appendChild(img);
      }
      b.appendChild(document.createTextNode(w.info.name));
      b.addEventListener('click', () => pay(w.provider));
      box.appendChild(b);
    });
    shown = list.length;
    $('no-wallet').hidden = list.length > 0 || !settled;
  });
})();
