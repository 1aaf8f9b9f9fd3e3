"""The web view: the cluster, the queue, each job and a GPU timeline in a browser.

`dlsched server` serves it at `/` (dlsched.web.routes) behind its token: the user pastes the token
once and gets a session cookie (dlsched.web.auth). `dlsched view OUT_DIR` serves the same pages
for a simulated run (dlsched.web.replay), from its output folder. Both answer the pages' data
calls under the same paths and shapes; where jobs ran is read from the scheduler's typed event
log by dlsched.web.placements. Every file the browser loads comes from static/ in this package
(Chart.js vendored under static/vendor/ with its licence): the view works air-gapped.
"""
