// Live updates of every dashboard page, from the job event stream (GET /v1/events, long
// polling with the session cookie; the API answers a user with their own jobs' events only).
//
// - A page with <ul id="events" data-cursor="STREAM-ID" [data-job="JOB"]> gets each new
//   event prepended as text (textContent only: an event's message is the job's text, never
//   markup), newest first, at most data-max (200) items.
// - A page with [data-refresh] elements (each with an id) re-reads itself when an event of a
//   job it shows arrives (at most once per REFRESH_MIN_MS) and swaps those elements for the
//   server's fresh rendering (parsed with DOMParser, never innerHTML).
(function () {
  "use strict";
  var WAIT_S = 5;
  var LIMIT = 100;
  var MAX_EVENTS_DEFAULT = 200;
  var REFRESH_MIN_MS = 5000;
  var RETRY_MIN_MS = 2000;
  var RETRY_MAX_MS = 30000;

  function el(tag, cls, text) {
    var node = document.createElement(tag);
    if (cls) { node.className = cls; }
    if (text !== undefined && text !== null) { node.textContent = String(text); }
    return node;
  }

  // "2026-12-01T19:04:05.123+00:00" -> "2026-12-01 19:04:05", as the server renders it (UTC).
  function shownTime(iso) {
    return String(iso || "").slice(0, 19).replace("T", " ");
  }

  function eventItem(e, withJob) {
    var li = el("li", "fresh");
    li.setAttribute("data-event-id", String(e.id));
    li.setAttribute("data-job-id", String(e.job_id || ""));
    li.appendChild(el("time", null, shownTime(e.at)));
    var state = String(e.state || "");
    // Only known state names become a class; anything else is shown, not styled.
    li.appendChild(el("span", /^[a-z-]{1,20}$/.test(state) ? "state state-" + state : "state", state));
    if (withJob && e.job_id) {
      var link = el("a", null, e.job_id);
      link.href = "/ui/jobs/" + encodeURIComponent(e.job_id);
      li.appendChild(link);
    }
    if (e.kind) { li.appendChild(el("span", "kind", e.kind)); }
    li.appendChild(el("span", "message", e.message));
    return li;
  }

  function EventList(list) {
    this.list = list;
    this.job = list.getAttribute("data-job") || null;
  }

  EventList.prototype.max = function () {
    return parseInt(this.list.getAttribute("data-max") || "", 10) || MAX_EVENTS_DEFAULT;
  };

  EventList.prototype.add = function (events) {
    var list = this.list;
    events.forEach(function (e) {
      if (list.querySelector('li[data-event-id="' + CSS.escape(String(e.id)) + '"]')) { return; }
      var empty = list.querySelector("li.empty");
      if (empty) { list.removeChild(empty); }
      list.insertBefore(eventItem(e, !this.job), list.firstChild);
    }, this);
    var max = this.max();
    while (list.children.length > max) { list.removeChild(list.lastChild); }
  };

  // -- refreshing the parts of the page that show jobs ----------------------------------------
  var refreshAt = 0;
  var refreshTimer = null;

  function shows(jobId, listJob) {
    if (!jobId) { return false; }
    if (listJob && listJob === jobId) { return true; }
    return Array.prototype.some.call(document.querySelectorAll("[data-refresh] [data-job-id]"),
      function (row) { return row.getAttribute("data-job-id") === jobId; });
  }

  function refreshNow() {
    refreshTimer = null;
    refreshAt = Date.now();
    fetch(window.location.href, {credentials: "same-origin", headers: {Accept: "text/html"}})
      .then(function (r) {
        if (!r.ok || (r.redirected && r.url.indexOf("/ui/login") !== -1)) { return null; }
        return r.text();
      })
      .then(function (text) {
        if (!text) { return; }
        var fresh = new DOMParser().parseFromString(text, "text/html");
        Array.prototype.forEach.call(document.querySelectorAll("[data-refresh][id]"), function (old) {
          var next = fresh.getElementById(old.id);
          if (next && next.hasAttribute("data-refresh")) {
            old.parentNode.replaceChild(document.importNode(next, true), old);
          }
        });
      })
      .catch(function () { /* the next event tries again */ });
  }

  function scheduleRefresh() {
    if (refreshTimer !== null) { return; }
    var wait = Math.max(0, refreshAt + REFRESH_MIN_MS - Date.now());
    refreshTimer = window.setTimeout(refreshNow, wait);
  }

  // -- following the stream -------------------------------------------------------------------
  function setStatus(status, text, off) {
    if (!status) { return; }
    status.textContent = text;
    status.className = off ? "live-status off" : "live-status";
  }

  function follow(list, cursor) {
    var events = list ? new EventList(list) : null;
    var job = events ? events.job : null;
    var retry = RETRY_MIN_MS;
    var refreshing = document.querySelector("[data-refresh]") !== null;
    var status = null;
    if (list) {
      status = el("p", "live-status", "following live events");
      list.parentNode.insertBefore(status, list);
    }

    function poll() {
      var url = "/v1/events?wait_s=" + WAIT_S + "&limit=" + LIMIT + "&after=" + encodeURIComponent(cursor);
      if (job) { url += "&job=" + encodeURIComponent(job); }
      fetch(url, {credentials: "same-origin", headers: {Accept: "application/json"}})
        .then(function (r) {
          if (r.status === 401 || r.status === 403 || r.status === 404) {
            setStatus(status, "live events stopped (log in again to follow them)", true);
            return null;
          }
          if (!r.ok) { throw new Error("HTTP " + r.status); }
          return r.json();
        })
        .then(function (page) {
          if (page === null) { return; }
          retry = RETRY_MIN_MS;
          setStatus(status, "following live events", false);
          var got = page.events || [];
          if (events && got.length) { events.add(got); }
          if (refreshing && got.some(function (e) {
            return shows(e.job_id, job) || (!job && e.state === "pending");
          })) { scheduleRefresh(); }
          cursor = page.next || cursor;
          window.setTimeout(poll, got.length ? 0 : 250);
        })
        .catch(function () {
          setStatus(status, "reconnecting…", true);
          window.setTimeout(poll, retry);
          retry = Math.min(RETRY_MAX_MS, retry * 2);
        });
    }
    poll();
  }

  function start() {
    var list = document.getElementById("events");
    var cursor = list ? list.getAttribute("data-cursor") : null;
    if (list && cursor) {
      follow(list, cursor);
    } else if (document.querySelector("[data-refresh]")) {
      // No event list: start from the stream's end (the newest event's id).
      fetch("/v1/events?limit=1", {credentials: "same-origin", headers: {Accept: "application/json"}})
        .then(function (r) { return r.ok ? r.json() : null; })
        .then(function (page) { if (page && page.next) { follow(null, page.next); } })
        .catch(function () { /* no live updates on this page */ });
    }
  }

  window.GA = window.GA || {};
  window.GA.eventItem = eventItem;
  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", start);
  } else {
    start();
  }
})();
