"""The web console: a static single page (HTML, vanilla JS, CSS) served by the service itself,
reading the JSON API, and the API docs served offline."""
