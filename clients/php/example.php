<?php

// A Baton lock from PHP. Start Baton (`make run` at the project's root), then
// `php example.php` here. BATON_URL and BATON_API_KEY are read when set.

declare(strict_types=1);

require __DIR__ . '/autoload.php'; // with Composer: require 'vendor/autoload.php';

use Baton\Client;
use Baton\Lease;
use Baton\LockHeldException;

$baton = new Client(); // BATON_URL (else http://localhost:8080), BATON_API_KEY

// Run a job while holding a lock: released however the job ends.
$fence = $baton->synchronized('nightly-report', function (Lease $lease): int {
    // ... write the report; hand $lease->fence to the storage you write to,
    // and have it refuse writes with a fence lower than one it has seen ...
    return $lease->fence;
}, ttl: 30.0, wait: 10.0);
echo "report written under fence $fence\n";

// Or step by step.
$lease = $baton->acquire('invoices:2024-06', ttl: 30.0, wait: 0.0, owner: 'billing-worker-3');
try {
    $baton->acquire('invoices:2024-06', wait: 0.0); // someone else, at the same time
} catch (LockHeldException $e) {
    printf("busy: held by %s for %.1f s more\n", $e->owner, $e->ttl);
}
$lease->renew(60.0); // PHP renews nothing by itself: renew before the ttl runs out
$lease->release();
echo "released\n";
