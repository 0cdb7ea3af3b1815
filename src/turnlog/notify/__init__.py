"""The notifier: people told when a question waits (``turnlog notify``).

It follows the pauses, resumed and rejections topics and posts one signed JSON notice to each
webhook when a pause is recorded, when its window is about to close (a reminder), and when it is
resumed, refused or expired. Its progress is the offsets of a consumer group per webhook, each
committed after the delivery it covers, so a restart goes on where the last one stopped; the
reminders come from the pauses' deadlines, replayed at every start. The token never leaves the
log: a notice links to the pause's inbox page instead.

- :mod:`~turnlog.notify.config`: what the notifier is told (webhooks, secret, lead, links);
- :mod:`~turnlog.notify.payload`: a notice and its JSON or Slack body (pure);
- :mod:`~turnlog.notify.text`: a summary as one marked, clipped line (pure);
- :mod:`~turnlog.notify.signing`: the HMAC-SHA256 signature header, and its check (pure);
- :mod:`~turnlog.notify.backoff`: the retry schedule (pure);
- :mod:`~turnlog.notify.book`: the pauses known, which are open, the reminders owed (pure);
- :mod:`~turnlog.notify.sender`: one POST, and its retries (the HTTP edge);
- :mod:`~turnlog.notify.lane`: one webhook's consumer, deliveries and commits (the Kafka edge);
- :mod:`~turnlog.notify.notifier`: the restore and the lanes, as one component.
"""
