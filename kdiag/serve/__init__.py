"""The /metrics exposition and the web server with its configuration and logins."""
