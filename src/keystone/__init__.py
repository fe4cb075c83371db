"""Keystone: a multi-tenant event router on Apache Spark."""
