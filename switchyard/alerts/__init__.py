"""Alert notifications in, sagas out: the pure part of ``switchyard webhook`` (the process is in
``workers/webhook``).

- :mod:`~switchyard.alerts.payloads`: Alertmanager's and Grafana's notifications, and the one shape
  the rest works on;
- :mod:`~switchyard.alerts.auth`: who may send them (bearer, basic, HMAC), secrets kept out of logs;
- :mod:`~switchyard.alerts.policies`: which alert starts which saga on which keys;
- :mod:`~switchyard.alerts.dispatch`: what a notification does, idempotently, against a small interface
  to the sagas (:class:`~switchyard.alerts.dispatch.SagaPort`; on Temporal in ``workers/webhook``, in
  memory for the tests in ``tests/helpers/alerts.py``).
"""
