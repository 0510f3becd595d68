"""Slack: the ``/broker`` slash command, its buttons, and per-team notifications.

Pure parts — :mod:`.config` (what the ``slack:`` section means),
:mod:`.commands` (slash-command text → a command), :mod:`.blocks` and
:mod:`.messages` (Block Kit rendering), :mod:`.dispatch` (a command or a
button → one service call → a reply) — and two that touch the network:
:mod:`.sdk` (the only module importing ``slack_sdk``) and :mod:`.notify`
(a background sender with bounded retries). The HTTP routes live in
:mod:`broker.api.slack`. Setup for users: ``docs/slack.md``.
"""
