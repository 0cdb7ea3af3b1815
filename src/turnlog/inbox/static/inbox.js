// The inbox's only script: live list, live pause state, the answer's outcome, the login link.
// No inline script anywhere (the Content-Security-Policy forbids it); every page works without
// this file, only less live.
"use strict";

function say(el, text, cls) {
  if (!el) return;
  el.textContent = text;
  if (cls) el.className = el.className.replace(/\bstate-\S+/g, "").trim() + " " + cls;
}

// The same two units as the server's duration(): 3d 4h, 5h 12m, 7m 3s, 42s.
function duration(ms) {
  const seconds = Math.max(0, Math.floor(ms / 1000));
  const days = Math.floor(seconds / 86400);
  const hours = Math.floor((seconds % 86400) / 3600);
  const minutes = Math.floor((seconds % 3600) / 60);
  const secs = seconds % 60;
  if (days) return `${days}d ${hours}h`;
  if (hours) return `${hours}h ${minutes}m`;
  if (minutes) return `${minutes}m ${secs}s`;
  return `${secs}s`;
}

// "Waiting" and "Time left" count, from the server's values: the page was rendered at
// data-now by the server's clock, so this browser's clock only measures the time since.
function countdowns() {
  const counts = document.querySelectorAll("time.count[data-now]");
  if (!counts.length) return;
  const loaded = Date.now();
  function tick() {
    const elapsed = Date.now() - loaded;
    for (const el of counts) {
      const now = Date.parse(el.dataset.now) + elapsed;
      if (el.dataset.from) el.textContent = duration(now - Date.parse(el.dataset.from));
      else if (el.dataset.until) el.textContent = duration(Date.parse(el.dataset.until) - now);
    }
  }
  window.setInterval(tick, 1000);
}

// The page's live stream: a snapshot of the ids the page shows ("snapshot", and "resync" when
// the server could not follow from where the stream stood), then what moved ("diff": the ids
// added and removed). `query` is the page's own (its filters and cursor, or one pause).
function live(query, onSnapshot, onDiff) {
  const source = new EventSource("/events" + query);
  const snapshot = (e) => onSnapshot(JSON.parse(e.data));
  source.addEventListener("snapshot", snapshot);
  source.addEventListener("resync", snapshot);
  source.addEventListener("diff", (e) => onDiff(JSON.parse(e.data)));
  // The session expired or was signed out (here or in another tab): the stream ends, and the
  // page says so instead of going quietly stale.
  source.addEventListener("signed-out", () => {
    source.close();
    const banner = document.getElementById("session-ended");
    if (banner) banner.hidden = false;
  });
  window.addEventListener("pagehide", () => source.close());
  return source;
}

function listPage() {
  const box = document.getElementById("rows");
  const query = window.location.search;
  // Ids the stream said arrived, fetched as rows a batch at a time (one fetch in flight).
  const wanted = new Set();
  // Ids that left while a fetch was in flight: its answer may still hold them.
  const left = new Set();
  let busy = false;

  function shownRows() {
    return box.querySelectorAll("ul.pauses > li.pause");
  }

  function recount() {
    const count = shownRows().length;
    const status = document.getElementById("list-status");
    if (status) status.textContent = `${count} waiting` + (status.dataset.more ? " on this page" : "");
    const empty = box.querySelector("p.empty");
    if (empty) empty.hidden = count > 0;
  }

  function remove(ids) {
    for (const id of ids) {
      wanted.delete(id);
      if (busy) left.add(id);
      const row = box.querySelector(`li.pause[data-token="${CSS.escape(id)}"]`);
      if (row) row.remove();
    }
    recount();
  }

  // Each new row goes where the list's order puts it (oldest first, as the server sorts).
  function insert(row) {
    const list = box.querySelector("ul.pauses");
    if (!list || box.querySelector(`li.pause[data-token="${CSS.escape(row.dataset.token)}"]`)) return;
    const later = Array.from(shownRows()).find((li) => li.dataset.order > row.dataset.order);
    list.insertBefore(row, later || null);
  }

  async function fetchAdded() {
    if (busy || !wanted.size) return;
    busy = true;
    try {
      while (wanted.size) {
        const ids = Array.from(wanted).slice(0, 100); // the rest in the next round
        for (const id of ids) wanted.delete(id);
        const params = new URLSearchParams(query);
        for (const id of ids) params.append("token", id);
        const page = await fetch("/rows?" + params.toString(), { credentials: "same-origin" });
        if (!page.ok) return;
        const template = document.createElement("template");
        template.innerHTML = await page.text();
        for (const row of template.content.querySelectorAll("li.pause")) {
          if (!left.has(row.dataset.token)) insert(row);
        }
        recount();
      }
    } finally {
      busy = false;
      left.clear();
    }
  }

  live(
    query,
    (snap) => {
      // The page as the server has it now: rows that left go, rows it lacks are fetched.
      const ids = new Set(snap.ids);
      const gone = Array.from(shownRows(), (row) => row.dataset.token).filter((id) => !ids.has(id));
      remove(gone);
      const shown = new Set(Array.from(shownRows(), (row) => row.dataset.token));
      for (const id of snap.ids) if (!shown.has(id)) wanted.add(id);
      fetchAdded();
    },
    (diff) => {
      remove(diff.removed);
      for (const id of diff.added) wanted.add(id);
      fetchAdded();
    },
  );
}

function detailPage() {
  const token = document.body.dataset.token;
  const form = document.getElementById("answer-form");
  const status = document.getElementById("pause-status");
  const outcome = document.getElementById("outcome");
  const problem = document.getElementById("form-problem");
  let mine = false;
  countdowns();

  // The outcome is shown beside the Send button and brought into sight (on a phone the
  // button may be at the bottom of a long page).
  function tell(text, cls) {
    say(outcome, text, cls);
    if (outcome && text) outcome.scrollIntoView({ block: "nearest" });
  }

  function reopen() {
    if (!form) return;
    for (const el of form.elements) el.disabled = false;
    form.removeAttribute("aria-disabled");
    mine = false;
  }

  function close(words) {
    if (form) {
      for (const el of form.elements) el.disabled = true;
      form.setAttribute("aria-disabled", "true");
    }
    say(status, words);
  }

  // This pause's own stream: it says when the pause left (answered, expired, forgotten).
  async function check() {
    if (mine) return;
    const r = await fetch(`/pause/${encodeURIComponent(token)}/state`, {
      headers: { Accept: "application/json" },
      credentials: "same-origin",
    });
    if (!r.ok || mine) return;
    const state = await r.json();
    if (state.status !== "pending") {
      close(state.status === "answered" ? "Already answered (elsewhere)" : state.words);
    }
  }
  live(
    "?token=" + encodeURIComponent(token),
    (snap) => {
      if (!snap.ids.includes(token)) check();
    },
    (diff) => {
      if (diff.removed.includes(token)) check();
    },
  );

  async function follow(answerId) {
    for (;;) {
      const r = await fetch(`/answers/${encodeURIComponent(answerId)}?wait=20`, {
        headers: { Accept: "application/json" },
        credentials: "same-origin",
      });
      if (!r.ok) {
        tell("could not learn the outcome (" + r.status + "): reload the page", "state-unknown");
        return;
      }
      const found = await r.json();
      if (found.state === "waiting") {
        tell("sent; waiting for the worker…", "state-waiting");
        continue;
      }
      if (found.state === "resumed") {
        say(status, "Answered by you");
        tell(found.words, found.decision === "reject" ? "state-continues" : "state-resumed");
      } else if (found.state === "rejected") {
        // The status agrees with the outcome: not "Answered by you" beside a refusal.
        const first = found.reason === "already_consumed";
        say(status, first ? "Answered by someone else" : "Not answered: your answer was not taken");
        tell(found.words, "state-refused");
        if (!first && found.reason !== "pause_expired") reopen();
      } else tell(found.words, "state-unknown");
      return;
    }
  }

  // This session's CSRF token, from the page as the inbox serves it now, into every form.
  async function refresh() {
    try {
      const r = await fetch(window.location.pathname, { credentials: "same-origin" });
      if (!r.ok) return false;
      const doc = new DOMParser().parseFromString(await r.text(), "text/html");
      const fresh = doc.querySelector("#answer-form input[name=csrf]");
      if (!fresh) return false;
      for (const el of document.querySelectorAll("input[name=csrf]")) el.value = fresh.value;
      return true;
    } catch (err) {
      return false;
    }
  }

  if (!form) return;
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    say(problem, "");
    const button = form.querySelector("button[type=submit]");
    button.disabled = true;
    tell("sending…", "state-waiting");
    mine = true;
    let r;
    try {
      r = await fetch(form.action, {
        method: "POST",
        body: new FormData(form),
        headers: { Accept: "application/json" },
        credentials: "same-origin",
      });
    } catch (err) {
      mine = false;
      button.disabled = false;
      say(outcome, "");
      say(problem, "could not reach the inbox: " + err);
      return;
    }
    const body = await r.json().catch(() => ({ words: "unexpected reply " + r.status }));
    if (r.status === 202) {
      close("Sent by you; waiting for the worker");
      tell("sent; waiting for the worker…", "state-waiting");
      follow(body.answer_id);
    } else if (r.status === 422) {
      mine = false;
      button.disabled = false;
      say(outcome, "");
      say(problem, body.words);
      problem.focus();
    } else if (r.status === 403 && String(body.error).includes("CSRF") && (await refresh())) {
      // The inbox restarted (or this session signed in again) since the page was shown: the
      // page's forms are fresh now, the person's input kept; nothing was sent.
      mine = false;
      button.disabled = false;
      say(outcome, "");
      say(problem, "Nothing was sent: this form was out of date (the inbox restarted, or you " +
        "signed in again). It is fresh now: send again.");
      problem.focus();
    } else if (r.status === 503) {
      mine = false;
      button.disabled = false;
      say(outcome, "");
      say(problem, body.words);
      problem.focus();
    } else {
      close(body.reason === "already_consumed" ? "Answered by someone else" : "Not answered");
      tell(body.words || body.error, "state-refused");
    }
  });
}

function loginPage() {
  // A login link carries the token in the fragment (never sent to a server or a log).
  const hash = window.location.hash;
  if (!hash.startsWith("#token=")) return;
  const field = document.getElementById("token");
  field.value = decodeURIComponent(hash.slice("#token=".length));
  history.replaceState(null, "", window.location.pathname);
  document.getElementById("login-form").submit();
}

document.addEventListener("DOMContentLoaded", () => {
  const page = document.body.dataset.page;
  if (page === "list") listPage();
  else if (page === "detail") detailPage();
  else if (page === "login") loginPage();
});
