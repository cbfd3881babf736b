// Hearth's demos: the two pieces of page every demo shows the same way: the connection badge
// (#conn: Offline, Connecting… until the relay has answered, Online) and the error bar
// (#error with #error-text and #error-close), so that what the database refuses is seen in
// the page, not only in the console.

/** The connection badge. Returns `show(fromCache)`: call it with each snapshot's
 *  `metadata.fromCache` (or with nothing, to show it again); the browser's online and
 *  offline events show it too. */
export function connectionBadge() {
  let fromCache = true;
  const show = (cached) => {
    if (cached !== undefined) fromCache = cached;
    const [text, cls] = !navigator.onLine ? ['Offline', 'offline']
      : fromCache ? ['Connecting…', ''] : ['Online', 'online'];
    const badge = document.getElementById('conn');
    badge.textContent = text;
    badge.className = `badge ${cls}`;
  };
  addEventListener('online', () => show());
  addEventListener('offline', () => show());
  return show;
}

/** The error bar. Returns `showError(e)`, which shows the error's code and message, after
 *  `why[code]` when the demo explains that code. With `uncaught`, errors nobody caught (a
 *  rejected promise, an exception) are shown too. */
export function errorBar(why = {}, { uncaught = false } = {}) {
  const bar = document.getElementById('error');
  const showError = (e) => {
    const said = `${e?.code ?? 'error'}: ${e?.message ?? e}`;
    const reason = why[e?.code];
    document.getElementById('error-text').textContent = reason ? `${reason} (${said})` : said;
    bar.hidden = false;
  };
  document.getElementById('error-close').onclick = () => { bar.hidden = true; };
  if (uncaught) {
    addEventListener('unhandledrejection', (e) => { e.preventDefault(); showError(e.reason); });
    addEventListener('error', (e) => showError(e.error ?? e.message));
  }
  return showError;
}
