-- the increments batch log lives in its own database next to Dagster's
CREATE DATABASE increments OWNER dagster;
