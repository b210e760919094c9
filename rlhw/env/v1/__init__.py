"""Generated code for proto/rlhw/env/v1/env.proto (regenerate with ``python -m rlhw.env.codegen``)."""
