<?php

declare(strict_types=1);

namespace Baton\Internal;

/**
 * Guard runs its cleanup when it is destroyed, unless disarmed: it covers the
 * one way out of a scoped use that `finally` misses, exit() in the middle
 * (PHP still destroys every object then). Errors in the cleanup are dropped:
 * nobody is left to tell.
 *
 * @internal
 */
final class Guard
{
    /** @var (\Closure(): mixed)|null */
    private ?\Closure $cleanup;

    /**
     * @param \Closure(): mixed $cleanup
     */
    public function __construct(\Closure $cleanup)
    {
        $this->cleanup = $cleanup;
    }

    public function disarm(): void
    {
        $this->cleanup = null;
    }

    public function __destruct()
    {
        $cleanup = $this->cleanup;
        $this->cleanup = null;
        if ($cleanup !== null) {
            try {
                $cleanup();
            } catch (\Throwable) {
            }
        }
    }
}
