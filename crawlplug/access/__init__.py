"""Who may do what, and what they did: the console's users and roles (:mod:`.users`) and the
audit log of every change made through the API, the dashboard or the CLI (:mod:`.audit`).
Below every face of crawlplug that changes a crawl, so each records its changes itself."""
