"""What the sagas and their steps exchange, with no I/O: the workflows import this, and only this, of
Switchyard, so they run in Temporal's sandbox. One dataclass in, one out, for every workflow and every
activity, so a field can be added without breaking a running history.

- :mod:`~switchyard.sagas.requests`: the workflows' inputs and results, and the policy they follow;
- :mod:`~switchyard.sagas.steps`: each activity's name, request and result;
- :mod:`~switchyard.sagas.ids`: workflow ids and search attributes.
"""
