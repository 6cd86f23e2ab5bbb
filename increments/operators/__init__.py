"""Physical operators: stateless SQL stages over Arrow, and the stateful operators on the state store."""
