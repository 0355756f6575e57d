// Baton dashboard. Plain JavaScript, no build step, no dependency.
//
// Everything shown comes from the API with the user's key:
//   GET /v1/locks?prefix=&limit=&cursor=   the list, every page, every LIST_EVERY ms
//   GET /v1/locks/{name}?wait_ms=&fence=   the opened lock, a long-poll watch
//   DELETE /v1/locks/{name}?force=true     force release (admin keys)
// A 401 asks for a key. The key stays in this tab's sessionStorage and is sent
// only in the Authorization header, never in a URL. Text from the server is
// only ever set with textContent: owner labels are whatever clients sent.
'use strict';

(() => {
  const KEY_STORE = 'baton.apiKey';
  const LIST_EVERY = 2000; // ms from the end of one list refresh to the next
  const MIN_GAP = 1000; // never two list refreshes closer than this, nor two reads of the opened lock
  const PAGE = 200; // locks per page
  const MAX_PAGES = 25; // pages per refresh: at most 5000 locks shown
  const WATCH_MAX = 25000; // the longest long-poll (halved while the server says it is too long)
  const FREE_RECHECK = 2000; // a free lock is read again this often (its watch returns at once)
  const NAME = /^[A-Za-z0-9._:-]{1,200}$/;

  const $ = (id) => document.getElementById(id);
  const now = () => performance.now();

  const state = {
    prefix: '',
    locks: new Map(), // name -> LockState with deadlines
    lastList: -Infinity,
    listTimer: 0,
    listBusy: false,
    listAgain: false,
    needKey: false, // a key was asked for and not given: loops wait for one
    open: null, // the opened lock's name
    openState: null,
    watch: null, // AbortController of the opened lock's watch loop
    maxWait: WATCH_MAX,
    truncated: false, // the last refresh stopped at MAX_PAGES
  };

  class ApiError extends Error {
    constructor(status, problem) {
      const p = problem || {};
      super(p.detail || p.title || `HTTP ${status}`);
      this.status = status;
      this.problem = p;
    }
    describe() {
      if (this.status === 0) return this.message;
      const title = this.problem.title || 'Error';
      return `${this.status} ${title}${this.problem.detail ? ': ' + this.problem.detail : ''}`;
    }
  }

  // ---- API access and the key -------------------------------------------

  const apiKey = () => sessionStorage.getItem(KEY_STORE) || '';

  async function api(method, path, signal) {
    for (let attempt = 0; ; attempt++) {
      const key = apiKey();
      const headers = { Accept: 'application/json' };
      if (key) headers.Authorization = 'Bearer ' + key;
      let res;
      try {
        res = await fetch(path, { method, headers, signal, cache: 'no-store', credentials: 'omit', redirect: 'error' });
      } catch (e) {
        if (signal && signal.aborted) throw e;
        throw new ApiError(0, { detail: 'Cannot reach Baton (' + e.message + ')' });
      }
      const text = await res.text();
      let body = null;
      try {
        body = text ? JSON.parse(text) : null;
      } catch (_) {
        body = null;
      }
      if (res.status === 401 && attempt < 3) {
        const reason = key
          ? 'The server did not accept this key. Enter another one.'
          : (body && body.detail) || 'The server asks for an API key.';
        await askKey(reason);
        continue;
      }
      if (!res.ok) throw new ApiError(res.status, body);
      return body;
    }
  }

  let keyPrompt = null; // one dialog for every request that met a 401

  function askKey(reason) {
    if (keyPrompt) return keyPrompt;
    const dialog = $('key-dialog');
    keyPrompt = new Promise((resolve, reject) => {
      $('key-reason').textContent = reason;
      $('key-input').value = '';
      dialog.returnValue = '';
      dialog.addEventListener('close', () => {
        keyPrompt = null;
        const key = $('key-input').value.trim();
        $('key-input').value = '';
        if (dialog.returnValue === 'ok' && key) {
          sessionStorage.setItem(KEY_STORE, key);
          state.needKey = false;
          showKeyState();
          resolve();
        } else {
          state.needKey = true;
          reject(new ApiError(401, { title: 'Unauthorized', detail: 'No API key: the dashboard cannot read locks without one.' }));
        }
      }, { once: true });
      dialog.showModal();
    });
    return keyPrompt;
  }

  function showKeyState() {
    const has = apiKey() !== '';
    $('key-state').textContent = has ? 'Using an API key' : 'No API key';
    $('key-button').textContent = has ? 'Change key' : 'Enter API key';
    $('forget-button').hidden = !has;
  }

  // A key entered from the header (not after a 401) restarts whatever waited for one.
  function enterKey(reason) {
    askKey(reason).then(restart, () => {});
  }

  function restart() {
    state.needKey = false;
    hide($('alert'));
    scheduleList(0);
    if (state.open) watchLock(state.open);
  }

  // ---- formatting --------------------------------------------------------

  // stamp gives a state (and its holds) deadlines on this page's clock.
  function stamp(st, at) {
    st.deadline = at + st.ttl_ms;
    for (const h of st.holds || []) h.deadline = at + h.ttl_ms;
    return st;
  }

  function left(ms) {
    if (ms <= 0) return 'ending';
    const s = Math.ceil(ms / 1000);
    if (s < 60) return `${s} s`;
    const m = Math.floor(s / 60);
    if (m < 60) return `${m} min ${String(s % 60).padStart(2, '0')} s`;
    const h = Math.floor(m / 60);
    if (h < 48) return `${h} h ${String(m % 60).padStart(2, '0')} min`;
    return `${Math.floor(h / 24)} d ${h % 24} h`;
  }

  // countdown makes el show the time left until deadline, kept current by tick.
  function countdown(el, deadline, held) {
    if (held) {
      el.dataset.deadline = String(deadline);
      el.textContent = left(deadline - now());
    } else {
      delete el.dataset.deadline;
      el.textContent = '—';
    }
  }

  function tick() {
    const t = now();
    for (const el of document.querySelectorAll('[data-deadline]')) {
      el.textContent = left(Number(el.dataset.deadline) - t);
    }
  }

  // when is a time, with its date unless it is today.
  function when(d) {
    const today = d.toDateString() === new Date().toDateString();
    return today ? d.toLocaleTimeString() : d.toLocaleString();
  }

  function holdersText(st) {
    return st.limit ? `${st.holders} of ${st.limit}` : String(st.holders);
  }

  function holderText(st) {
    if (!st.held) return '—';
    const who = st.owner || '(no owner label)';
    return st.holders > 1 ? `${who} +${st.holders - 1}` : who;
  }

  function queueText(n) {
    return n === 0 ? 'none' : n === 1 ? '1 waiting' : `${n} waiting`;
  }

  const show = (el) => { el.hidden = false; };
  const hide = (el) => { el.hidden = true; };

  function alertIn(el, text) {
    el.textContent = text;
    show(el);
  }

  // ---- the list ----------------------------------------------------------

  function scheduleList(delay) {
    if (state.listBusy) {
      state.listAgain = delay === 0;
      return;
    }
    clearTimeout(state.listTimer);
    const wait = Math.max(delay, state.lastList + MIN_GAP - now(), 0);
    state.listTimer = setTimeout(refreshList, wait);
  }

  async function refreshList() {
    if (document.hidden || state.needKey) return; // resumed by visibilitychange or a key
    state.listBusy = true;
    state.lastList = now();
    const prefix = state.prefix;
    try {
      const seen = new Map();
      let cursor = null;
      let pages = 0;
      do {
        const q = new URLSearchParams({ limit: String(PAGE) });
        if (prefix) q.set('prefix', prefix);
        if (cursor) q.set('cursor', cursor);
        const page = await api('GET', '/v1/locks?' + q.toString());
        const at = now();
        for (const l of page.locks) seen.set(l.name, stamp(l, at)); // a name may come twice: keep the later
        cursor = page.next_cursor;
        pages++;
      } while (cursor && pages < MAX_PAGES);
      if (prefix === state.prefix) {
        state.locks = seen;
        state.truncated = Boolean(cursor);
        renderList();
      } else {
        state.listAgain = true;
      }
      hide($('alert'));
    } catch (e) {
      alertIn($('alert'), e instanceof ApiError ? e.describe() : String(e));
    } finally {
      state.listBusy = false;
      const again = state.listAgain;
      state.listAgain = false;
      if (!state.needKey) scheduleList(again ? 0 : LIST_EVERY);
    }
  }

  // setText changes el's text only when it differs, so that a live region
  // speaks only of changes.
  function setText(el, text) {
    if (el.textContent !== text) el.textContent = text;
  }

  function renderList() {
    const body = $('locks').tBodies[0];
    const rows = new Map([...body.rows].map((r) => [r.dataset.name, r]));
    let prev = null;
    for (const name of [...state.locks.keys()].sort()) {
      let row = rows.get(name);
      if (row) rows.delete(name);
      else row = makeRow(name);
      fillRow(row, state.locks.get(name));
      const want = prev ? prev.nextElementSibling : body.firstElementChild;
      if (row !== want) body.insertBefore(row, want);
      prev = row;
    }
    for (const row of rows.values()) row.remove();

    const n = state.locks.size;
    const scope = state.prefix ? ` starting with “${state.prefix}”` : '';
    setText($('status'), `${n === 1 ? '1 lock' : n + ' locks'} held or queued${scope}` +
      (state.truncated ? ` (the first ${n}: narrow it with a prefix)` : ''));
    $('updated').textContent = 'Updated ' + new Date().toLocaleTimeString();
    const empty = $('empty');
    empty.textContent = `No lock is held or queued${scope}.`;
    empty.hidden = n > 0;
    $('locks').hidden = n === 0;
  }

  const COLUMNS = ['mode', 'holder', 'holders', 'fence', 'ttl', 'queue'];
  const LABELS = { mode: 'Mode', holder: 'Holder', holders: 'Holders', fence: 'Fence', ttl: 'Time left', queue: 'Queue' };
  const HOLD_LABELS = ['Owner', 'Fence', 'Count', 'Time left'];

  function makeRow(name) {
    const row = document.createElement('tr');
    row.setAttribute('role', 'row');
    row.dataset.name = name;
    const head = document.createElement('th');
    head.scope = 'row';
    head.setAttribute('role', 'rowheader');
    const open = document.createElement('button');
    open.type = 'button';
    open.className = 'link';
    open.textContent = name;
    open.setAttribute('aria-controls', 'detail');
    open.addEventListener('click', () => openLock(name));
    head.append(open);
    row.append(head);
    for (const col of COLUMNS) {
      const td = document.createElement('td');
      td.setAttribute('role', 'cell');
      td.className = col;
      td.dataset.label = LABELS[col];
      row.append(td);
    }
    return row;
  }

  function fillRow(row, st) {
    const cell = (col) => row.querySelector('td.' + col);
    const mode = cell('mode');
    mode.textContent = st.mode;
    mode.dataset.mode = st.mode;
    cell('holder').textContent = holderText(st);
    cell('holders').textContent = holdersText(st);
    cell('fence').textContent = String(st.fence);
    countdown(cell('ttl'), st.deadline, st.held);
    cell('queue').textContent = queueText(st.waiters);
    const opened = st.name === state.open;
    row.classList.toggle('opened', opened);
    if (opened) row.setAttribute('aria-current', 'true');
    else row.removeAttribute('aria-current');
    row.querySelector('button').setAttribute('aria-expanded', String(opened));
  }

  // ---- the opened lock ---------------------------------------------------

  function openLock(name) {
    if (!NAME.test(name)) return;
    state.open = name;
    state.openState = null;
    $('detail-title').textContent = name;
    hide($('detail-alert'));
    show($('detail'));
    $('layout').classList.add('with-detail');
    for (const row of $('locks').tBodies[0].rows) {
      const st = state.locks.get(row.dataset.name);
      if (st) fillRow(row, st);
    }
    const st = state.locks.get(name);
    if (st) renderDetail(st);
    else clearDetail();
    saveHash();
    $('detail-title').focus();
    watchLock(name);
  }

  function closeLock() {
    const name = state.open;
    if (state.watch) state.watch.abort();
    state.watch = null;
    state.open = null;
    state.openState = null;
    hide($('detail'));
    $('layout').classList.remove('with-detail');
    saveHash();
    for (const row of $('locks').tBodies[0].rows) {
      const st = state.locks.get(row.dataset.name);
      if (st) fillRow(row, st);
      if (row.dataset.name === name) row.querySelector('button').focus();
    }
  }

  function clearDetail() {
    for (const id of ['d-mode', 'd-holders', 'd-fence', 'd-ttl', 'd-expires', 'd-waiters']) $(id).textContent = '…';
    $('holds').tBodies[0].replaceChildren();
    $('watch-state').textContent = 'Reading the lock…';
  }

  function renderDetail(st) {
    state.openState = st;
    $('d-mode').textContent = st.mode;
    $('d-holders').textContent = holdersText(st);
    $('d-fence').textContent = String(st.fence);
    countdown($('d-ttl'), st.deadline, st.held);
    $('d-expires').textContent = st.expires_at ? when(new Date(st.expires_at)) : '—';
    $('d-waiters').textContent = queueText(st.waiters);
    const body = $('holds').tBodies[0];
    body.replaceChildren(...(st.holds || []).map((h) => {
      const row = document.createElement('tr');
      const cells = [h.owner || '(no owner label)', String(h.fence), String(h.count), ''];
      cells.forEach((text, i) => {
        const td = document.createElement('td');
        td.dataset.label = HOLD_LABELS[i];
        td.textContent = text;
        if (i === 3) countdown(td, h.deadline, true);
        row.append(td);
      });
      return row;
    }));
    $('holds').hidden = !st.held;
    $('no-holds').hidden = st.held;
    $('force-button').disabled = !st.held && st.waiters === 0;
  }

  function sleep(ms, signal) {
    return new Promise((resolve) => {
      const t = setTimeout(resolve, ms);
      signal.addEventListener('abort', () => { clearTimeout(t); resolve(); }, { once: true });
    });
  }

  function watchLock(name) {
    if (state.watch) state.watch.abort();
    const ctrl = new AbortController();
    state.watch = ctrl;
    watchLoop(name, ctrl.signal);
  }

  // watchLoop reads the opened lock, then long-polls it: a watch returns the
  // moment a hold ends, changes hands or is added, or when the soonest hold's
  // time is up (so a renewal shows too). A free lock's watch returns at once,
  // so a free lock is read every FREE_RECHECK ms instead.
  async function watchLoop(name, signal) {
    let st = null;
    while (!signal.aborted) {
      const started = now();
      let path = '/v1/locks/' + name;
      if (st && st.held) {
        const soonest = Math.min(st.ttl_ms, ...st.holds.map((h) => h.ttl_ms));
        const wait = Math.min(Math.max(soonest + 250, 1000), state.maxWait);
        path += `?wait_ms=${wait}&fence=${st.fence}`;
      }
      try {
        st = stamp(await api('GET', path, signal), now());
      } catch (e) {
        if (signal.aborted) return;
        if (e.status === 400 && e.problem.errors && e.problem.errors.wait_ms && state.maxWait > 1000) {
          state.maxWait = Math.max(1000, Math.floor(state.maxWait / 2)); // the server's BATON_MAX_WAIT is lower
          continue;
        }
        alertIn($('detail-alert'), e instanceof ApiError ? e.describe() : String(e));
        $('watch-state').textContent = 'Not live: the last read failed.';
        if (e.status === 401) return; // restarted when a key is entered
        st = null;
        await sleep(5000, signal);
        continue;
      }
      if (signal.aborted) return;
      renderDetail(st);
      const known = state.locks.get(name);
      if (st.held || st.waiters > 0) state.locks.set(name, st);
      else state.locks.delete(name);
      if (known || state.locks.has(name)) renderList();
      $('watch-state').textContent = st.held
        ? 'Live: updates the moment a hold ends, changes or is added.'
        : 'Free: read again every 2 s.';
      await sleep(Math.max(0, started + (st.held ? MIN_GAP : FREE_RECHECK) - now()), signal);
    }
  }

  // ---- force release -----------------------------------------------------

  function askForce() {
    const st = state.openState;
    const name = state.open;
    if (!name) return;
    const holds = st ? (st.holders === 1 ? 'its hold' : `all ${st.holders} of its holds`) : 'every hold';
    const queue = st && st.waiters > 0 ? ` and hands it to the next of the ${st.waiters} queued` : '';
    $('force-text').textContent =
      `This ends ${holds} on “${name}” at once, whoever holds it${queue}. ` +
      'The holders are not told: their next renewal or release fails (404), and only fencing stops writes they are still making.';
    const dialog = $('force-dialog');
    dialog.returnValue = '';
    dialog.dataset.name = name;
    dialog.showModal();
  }

  async function force(name) {
    hide($('detail-alert'));
    try {
      const r = await api('DELETE', `/v1/locks/${name}?force=true`);
      $('status').textContent = r.released ? `Force-released ${name}.` : `${name} had no holds: nothing released.`;
      scheduleList(0);
    } catch (e) {
      alertIn($('detail-alert'), e instanceof ApiError ? e.describe() : String(e));
    }
  }

  // ---- the address bar: which lock is open, which prefix (never a key) ----

  function saveHash() {
    const q = new URLSearchParams();
    if (state.prefix) q.set('prefix', state.prefix);
    if (state.open) q.set('lock', state.open);
    const hash = q.toString();
    history.replaceState(null, '', hash ? '#' + hash : location.pathname);
  }

  function loadHash() {
    const q = new URLSearchParams(location.hash.slice(1));
    const prefix = q.get('prefix') || '';
    if (/^[A-Za-z0-9._:-]{0,200}$/.test(prefix)) {
      state.prefix = prefix;
      $('prefix').value = prefix;
    }
    const lock = q.get('lock');
    if (lock && NAME.test(lock)) openLock(lock);
  }

  // ---- wiring ------------------------------------------------------------

  function start() {
    showKeyState();
    let typing = 0;
    $('prefix').addEventListener('input', () => {
      clearTimeout(typing);
      typing = setTimeout(() => {
        const input = $('prefix');
        if (!input.checkValidity()) return;
        state.prefix = input.value;
        saveHash();
        scheduleList(0);
      }, 300);
    });
    $('filter').addEventListener('submit', (e) => e.preventDefault());
    $('key-button').addEventListener('click', () => enterKey('Enter an API key (the server’s keys file names what each may do).'));
    $('forget-button').addEventListener('click', () => {
      sessionStorage.removeItem(KEY_STORE);
      showKeyState();
      restart();
    });
    $('key-cancel').addEventListener('click', () => $('key-dialog').close(''));
    $('close-detail').addEventListener('click', closeLock);
    $('force-button').addEventListener('click', askForce);
    $('force-dialog').addEventListener('close', () => {
      const dialog = $('force-dialog');
      if (dialog.returnValue === 'confirm' && dialog.dataset.name) force(dialog.dataset.name);
    });
    document.addEventListener('keydown', (e) => {
      if (e.key === 'Escape' && state.open && !document.querySelector('dialog[open]')) closeLock();
    });
    document.addEventListener('visibilitychange', () => {
      if (!document.hidden) scheduleList(0);
    });
    setInterval(tick, 250);
    loadHash();
    scheduleList(0);
  }

  start();
})();
