// Placeholder: tests land here.
