"""Typed policy objects, their defaults, and parsing of YAML/JSON documents into them."""
