"""Dashboard page groups: each module's ``router(store, objects)`` serves its pages."""
