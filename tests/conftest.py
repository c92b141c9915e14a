"""Shared test settings: a hypothesis profile sized for CI's 2 cores."""
import os

from hypothesis import HealthCheck, settings

settings.register_profile("ci", deadline=None, max_examples=20,
                          suppress_health_check=[HealthCheck.too_slow,
                                                 HealthCheck.function_scoped_fixture])
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))
