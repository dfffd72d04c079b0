"""The scenario model: scenario files (servers, users, demands, placement), their churn events,
and seeded random scenarios.  Pure data and validation; every other layer builds on it."""
