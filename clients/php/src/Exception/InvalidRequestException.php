<?php

declare(strict_types=1);

namespace Baton\Exception;

/**
 * InvalidRequestException: Baton rejected the request as malformed
 * (`400 invalid-request` or `invalid-name`, `413`, `415`, ...). `errors()` names
 * each bad field.
 */
class InvalidRequestException extends BatonException
{
    /**
     * The bad fields and why, from the problem's `errors`.
     *
     * @return array<string, string>
     */
    public function errors(): array
    {
        $errors = $this->problem['errors'] ?? [];

        return is_array($errors) ? array_map('strval', $errors) : [];
    }
}
