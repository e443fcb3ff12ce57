"""In-process fakes of what lies outside the service (the clouds, the clock), for tests that
drive real components (Redis, the controller) in milliseconds. Karpenter's ``pkg/fake`` is the
model: a fake records every call, lets a test make the next call of an operation fail, and
holds its state in memory where a test can set it."""
