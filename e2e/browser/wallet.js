// The paygate test wallet: an EIP-1193 provider that every document of a tab
// gets before its own scripts run (Page.addScriptToEvaluateOnNewDocument, so
// the page's CSP does not apply to it). It announces itself by EIP-6963 and,
// unless told not to, sets window.ethereum. It never uses fetch or XHR: each
// request goes to Go through a CDP binding (Runtime.addBinding), and Go
// settles it by calling the settle function below in the same context.
(function (cfg) {
  'use strict';
  if (Object.prototype.hasOwnProperty.call(window, cfg.settle)) return;

  var pending = new Map();
  var listeners = new Map();
  var seq = 0;

  function providerError(e) {
    var err = new Error(e.message);
    err.code = e.code;
    if (e.data !== undefined && e.data !== null) err.data = e.data;
    return err;
  }

  function on(event, fn) {
    if (typeof fn !== 'function') return provider;
    if (!listeners.has(event)) listeners.set(event, []);
    listeners.get(event).push(fn);
    return provider;
  }

  function removeListener(event, fn) {
    var list = listeners.get(event);
    if (list) {
      var i = list.indexOf(fn);
      if (i >= 0) list.splice(i, 1);
    }
    return provider;
  }

  var provider = {
    isPaygateTestWallet: true,
    request: function (args) {
      if (!args || typeof args !== 'object' || typeof args.method !== 'string' || args.method === '') {
        return Promise.reject(providerError({ code: -32600, message: 'request expects {method, params}' }));
      }
      var params = args.params === undefined ? [] : args.params;
      return new Promise(function (resolve, reject) {
        var id = ++seq;
        pending.set(id, { resolve: resolve, reject: reject });
        try {
          window[cfg.binding](JSON.stringify({ id: id, method: args.method, params: params }));
        } catch (e) {
          pending.delete(id);
          reject(providerError({ code: -32603, message: 'test wallet unreachable: ' + e }));
        }
      });
    },
    on: on,
    addListener: on,
    removeListener: removeListener,
    off: removeListener,
  };

  Object.defineProperty(window, cfg.settle, {
    value: function (id, result, error) {
      var p = pending.get(id);
      if (!p) return;
      pending.delete(id);
      if (error) p.reject(providerError(error));
      else p.resolve(result);
    },
  });

  Object.defineProperty(window, cfg.emit, {
    value: function (event, data) {
      (listeners.get(event) || []).slice().forEach(function (fn) {
        try {
          fn(data);
        } catch (e) {
          // A listener's fault is the page's: let it surface as an
          // uncaught exception, as it would with a real wallet.
          queueMicrotask(function () { throw e; });
        }
      });
    },
  });

  if (cfg.windowEthereum) window.ethereum = provider;

  // EIP-6963: announce now and whenever the page asks.
  var info = Object.freeze({ uuid: cfg.uuid, name: cfg.name, icon: cfg.icon, rdns: cfg.rdns });
  var detail = Object.freeze({ info: info, provider: provider });
  function announce() {
    window.dispatchEvent(new CustomEvent('eip6963:announceProvider', { detail: detail }));
  }
  window.addEventListener('eip6963:requestProvider', announce);
  announce();
})
