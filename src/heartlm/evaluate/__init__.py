"""`heartlm evaluate`: EC57 beat-class scores and AFIB window scores of a fine-tuned run."""
