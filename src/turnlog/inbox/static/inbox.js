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

function liveIds(onIds) {
  const source = new EventSource("/events");
  source.addEventListener("pending", (e) => onIds(JSON.parse(e.data)));
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
  let busy = false;
  liveIds(async (ids) => {
    const list = box.querySelector(".pauses");
    const shown = list ? list.dataset.ids.split(" ").filter(Boolean) : [];
    const wanted = new Set(ids);
    // A row whose pause left (answered, expired, forgotten) goes at once.
    for (const row of box.querySelectorAll("li.pause")) {
      if (!wanted.has(row.dataset.token)) row.remove();
    }
    const same = shown.length === ids.length && shown.every((id) => wanted.has(id));
    if (same || busy) return;
    busy = true;
    try {
      const page = await fetch("/rows" + window.location.search, { credentials: "same-origin" });
      if (page.ok) {
        const focused = document.activeElement && document.activeElement.closest("li.pause");
        const token = focused ? focused.dataset.token : null;
        box.innerHTML = await page.text();
        if (token) {
          const again = box.querySelector(`li.pause[data-token="${CSS.escape(token)}"] a.open`);
          if (again) again.focus();
        }
      }
    } finally {
      busy = false;
    }
  });
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

  liveIds(async (ids) => {
    if (mine || ids.includes(token)) return;
    const r = await fetch(`/pause/${encodeURIComponent(token)}/state`, {
      headers: { Accept: "application/json" },
      credentials: "same-origin",
    });
    if (!r.ok || mine) return;
    const state = await r.json();
    if (state.status !== "pending") {
      close(state.status === "answered" ? "Already answered (elsewhere)" : state.words);
    }
  });

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
