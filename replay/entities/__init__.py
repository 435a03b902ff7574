"""What the replay engine simulates: requests, generation instances, and busy resources."""
