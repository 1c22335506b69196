// Placeholder: the data helper replaces this file.
