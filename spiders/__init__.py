"""Example spiders of the crawlplug demo project."""
