"""The edges beside the JSON API: Slack, the cost dashboard and ``/metrics``.

``create_app`` calls :func:`install_edges` once; calling it again does nothing.
"""

from __future__ import annotations

from broker.config import Settings


def install_edges(app, service, settings: Settings) -> None:
    """Mount ``/v1/costs``, ``/dashboard``, ``/metrics`` and ``/slack/*``, and time every request.

    Also sets ``app.state.notifier`` (a :class:`broker.slack.notify.Notifier`
    when Slack notifications are configured, else ``None``): the engine and the
    service call ``notifier.handle(event, job)`` after each committed event.
    """
    if getattr(app.state, "edges_installed", False):
        return
    app.state.edges_installed = True
    from broker.api import dashboard, metrics, slack

    metrics.install_latency_middleware(app)
    app.include_router(dashboard.router(service, settings))
    app.include_router(metrics.router(service, settings, app=app))
    app.include_router(slack.router(service, settings))
    app.state.notifier = slack.notifier_for(service.store, settings)
