// paygate dashboard: progressive enhancement only. Every page works
// without this script; it adds copy buttons and signs wallet proofs with a
// browser wallet.
(function () {
  'use strict';
  document.querySelectorAll('.js-only').forEach(function (el) { el.hidden = false; });
  document.addEventListener('click', function (ev) {
    var b = ev.target.closest('[data-copy]');
    if (!b || !navigator.clipboard) return;
    navigator.clipboard.writeText(b.getAttribute('data-copy')).then(function () {
      var was = b.textContent;
      b.textContent = 'Copied';
      setTimeout(function () { b.textContent = was; }, 1500);
    }, function () { b.textContent = 'Copy failed'; });
  });

  // Wallet proofs: the browser wallet signs the message shown (EIP-1193
  // personal_sign, found by EIP-6963 or window.ethereum; Solana's injected
  // signMessage), and the form is sent with its signature.
  var evmWallets = [];
  window.addEventListener('eip6963:announceProvider', function (e) {
    if (e.detail && e.detail.provider && evmWallets.indexOf(e.detail.provider) < 0) evmWallets.push(e.detail.provider);
  });
  window.dispatchEvent(new Event('eip6963:requestProvider'));
  function hex(bytes) {
    return Array.prototype.map.call(bytes, function (b) { return ('0' + b.toString(16)).slice(-2); }).join('');
  }
  function holds(accounts, address) {
    return (accounts || []).filter(function (a) { return a.toLowerCase() === address.toLowerCase(); })[0];
  }
  // The wallet to ask: of several, one already connected with the address
  // (eth_accounts asks the user nothing), else the first.
  function evmProvider(address) {
    var all = evmWallets.length ? evmWallets : (window.ethereum ? [window.ethereum] : []);
    if (!all.length) return Promise.reject(new Error('no browser wallet found; paste a signature instead'));
    // A wallet that does not answer within 3 s is taken not to hold it.
    var late = function () { return new Promise(function (ok) { setTimeout(function () { ok(null); }, 3000); }); };
    return Promise.all(all.map(function (p) {
      return Promise.race([p.request({ method: 'eth_accounts' }).then(function (a) { return holds(a, address) ? p : null; },
        function () { return null; }), late()]);
    })).then(function (found) { return found.filter(Boolean)[0] || all[0]; });
  }
  function sign(family, address, message) {
    var bytes = new TextEncoder().encode(message);
    if (family === 'evm') {
      return evmProvider(address).then(function (p) {
        return p.request({ method: 'eth_requestAccounts' }).then(function (accounts) {
          var own = holds(accounts, address);
          if (!own) throw new Error('the wallet connected is not ' + address + '; switch to it in your wallet');
          return p.request({ method: 'personal_sign', params: ['0x' + hex(bytes), own] });
        });
      });
    }
    var s = (window.phantom && window.phantom.solana) || window.solana;
    if (!s || !s.signMessage) return Promise.reject(new Error('no Solana wallet found; paste a signature instead'));
    return Promise.resolve(s.connect && s.connect()).then(function () {
      if (!s.publicKey || s.publicKey.toString() !== address) {
        throw new Error('the wallet connected is not ' + address + '; switch to it in your wallet');
      }
      return s.signMessage(bytes, 'utf8');
    }).then(function (r) {
      var sig = r && r.signature ? r.signature : r;
      if (!sig || sig.length !== 64) throw new Error('the wallet gave no 64-byte signature');
      return hex(sig);
    });
  }
  document.querySelectorAll('form.proof-form [data-sign]').forEach(function (btn) {
    btn.addEventListener('click', function () {
      var form = btn.closest('form'), status = form.querySelector('.sign-status');
      status.textContent = 'Waiting for your wallet…';
      sign(form.dataset.family, form.dataset.address, form.dataset.message).then(function (sig) {
        form.querySelector('input[name=signature]').value = sig;
        status.textContent = 'Signed; recording…';
        form.submit();
      }, function (e) {
        status.textContent = e && e.code === 4001 ? 'You declined to sign.' : 'Not signed: ' + ((e && e.message) || e);
      });
    });
  });
})();
