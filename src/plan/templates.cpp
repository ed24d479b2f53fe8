// Placeholder: implementation lands here.
