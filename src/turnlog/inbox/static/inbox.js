// The inbox's only script: live list, live pause state, the answer's outcome, the login link.
// No inline script anywhere (the Content-Security-Policy forbids it); every page works without
// this file, only less live.
"use strict";

function say(el, text, cls) {
  if (!el) return;
  el.textContent = text;
  if (cls) el.className = el.className.replace(/\bstate-\S+/g, "").trim() + " " + cls;
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
        say(outcome, "could not learn the outcome (" + r.status + ")", "state-unknown");
        return;
      }
      const found = await r.json();
      if (found.state === "waiting") {
        say(outcome, "sent; waiting for the worker…", "state-waiting");
        continue;
      }
      if (found.state === "resumed") say(outcome, "resumed", "state-resumed");
      else if (found.state === "rejected") say(outcome, "rejected: " + found.words, "state-rejected");
      else say(outcome, found.words, "state-unknown");
      return;
    }
  }

  if (!form) return;
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    say(problem, "");
    const button = form.querySelector("button[type=submit]");
    button.disabled = true;
    say(outcome, "sending…", "state-waiting");
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
      close("Answered by you");
      say(outcome, "sent; waiting for the worker…", "state-waiting");
      follow(body.answer_id);
    } else if (r.status === 422) {
      mine = false;
      button.disabled = false;
      say(outcome, "");
      say(problem, body.words);
      problem.focus();
    } else {
      close(body.words || body.error);
      say(outcome, body.words || body.error, "state-rejected");
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
