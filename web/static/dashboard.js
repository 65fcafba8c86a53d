// paygate dashboard: progressive enhancement only. Every page works
// without this script; it adds copy buttons.
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
})();
