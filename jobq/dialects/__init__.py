"""The only package that knows which database it is talking to: base.Dialect says what each
provides, named.dialect_named picks one. Importing the package imports none of them, so that
the portable column types (types.py) can be read by jobq.dialects.schema without a cycle."""
